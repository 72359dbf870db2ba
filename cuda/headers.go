package cuda

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"

	"stepbench/internal/input"
)

// CUDAHeaders is a CUDA toolkit's include directory, offered to NVRTC (-I)
// so that kernels may include cuda_bf16.h and cuda_fp16.h (NVRTC ships
// neither). Nothing of NVIDIA's is copied: the directory is the machine's.
type CUDAHeaders struct {
	Dir          string
	Major, Minor int    // CUDART_VERSION of its cuda_runtime_api.h (0 when it does not say)
	From         string // where it was found: "$CUDA_HOME", "/usr/local/cuda*", "wheel", "Debian"
}

func (h CUDAHeaders) String() string {
	if h.Major == 0 {
		return fmt.Sprintf("%s (from %s)", h.Dir, h.From)
	}
	return fmt.Sprintf("%s (CUDA %d.%d, from %s)", h.Dir, h.Major, h.Minor, h.From)
}

var cudartVersionRe = regexp.MustCompile(`(?m)^#define\s+CUDART_VERSION\s+(\d+)`)

// FindCUDAHeaders looks for a CUDA include directory holding cuda_bf16.h:
// $CUDA_HOME/include, /usr/local/cuda*/include (newest first), the NVIDIA
// Python wheels' include directories (nvidia/cuda_runtime/include,
// nvidia/cuda_nvrtc/include, nvidia/cu13/include) and Debian's
// nvidia-cuda-dev (/usr/include). Of those found, the first whose CUDA
// major version is nvrtcMajor wins (headers of another major may not
// compile with that NVRTC), else the first; ok is false when none is there.
func FindCUDAHeaders(nvrtcMajor int) (CUDAHeaders, bool) {
	return findCUDAHeaders(hostSearchEnv(), nvrtcMajor)
}

func findCUDAHeaders(env searchEnv, nvrtcMajor int) (CUDAHeaders, bool) {
	type candidate struct{ dir, from string }
	var cands []candidate
	if home := env.getenv("CUDA_HOME"); home != "" {
		cands = append(cands, candidate{filepath.Join(home, "include"), "$CUDA_HOME"})
	}
	for _, inc := range newestCUDADirsFirst(env.glob("/usr/local/cuda*/include")) {
		cands = append(cands, candidate{inc, "/usr/local/cuda*"})
	}
	for _, base := range []string{"/usr/lib", "/usr/local/lib", filepath.Join(env.home, ".local/lib")} {
		for _, kind := range []string{"dist-packages", "site-packages"} {
			for _, root := range env.glob(filepath.Join(base, "python3*", kind)) {
				for _, w := range []string{"nvidia/cuda_runtime/include", "nvidia/cuda_nvrtc/include", "nvidia/cu13/include"} {
					cands = append(cands, candidate{filepath.Join(root, w), "wheel"})
				}
			}
		}
	}
	cands = append(cands, candidate{"/usr/include", "Debian"})
	var found []CUDAHeaders
	for _, c := range cands {
		if !env.exists(filepath.Join(c.dir, "cuda_bf16.h")) {
			continue
		}
		h := CUDAHeaders{Dir: c.dir, From: c.from}
		if text, err := input.ReadFile(filepath.Join(c.dir, "cuda_runtime_api.h"), 16<<20, "cuda_runtime_api.h"); err == nil {
			if m := cudartVersionRe.FindSubmatch(text); m != nil {
				v, _ := strconv.Atoi(string(m[1]))
				h.Major, h.Minor = v/1000, v%1000/10
			}
		}
		found = append(found, h)
	}
	for _, h := range found {
		if h.Major == nvrtcMajor {
			return h, true
		}
	}
	if len(found) == 0 {
		return CUDAHeaders{}, false
	}
	return found[0], true
}
