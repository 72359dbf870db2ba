package gpu

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"stepbench/internal/input"
	"stepbench/kernels"
)

// gemm_cache.go keeps gemm version 2's tuned choices on disk, one small
// JSON file per shape under the cubin cache's directory (gemm-lt/), so a
// later run of the same GPU, cuBLASLt and shape skips the timing. An entry
// is trusted only when its format, checksum and key match and cuBLASLt's
// heuristic still offers its algorithm; anything else is noted and the
// shape tuned again.

// gemmCacheFormat is the first field of every entry; a change of the
// entry's meaning changes it, which makes older entries stale.
const gemmCacheFormat = "stepbench gemm-lt cache 1"

// GemmKey is what a tuned choice depends on: the GPU (name and compute
// capability), cuBLASLt (version, and the emulator's description on the
// emulated device), and the product in cuBLAS's column-major terms with its
// operands' alignments.
type GemmKey struct {
	GPU               string `json:"gpu"`
	ComputeCapability string `json:"compute_capability"`
	CublasLtVersion   int    `json:"cublaslt_version"`
	Emulated          string `json:"emulated,omitempty"`
	M                 int    `json:"m"`
	N                 int    `json:"n"`
	K                 int    `json:"k"`
	Layout            string `json:"layout"` // "TN": op(A) = Aᵀ, op(B) = B
	DType             string `json:"dtype"`
	Lda               int    `json:"lda"`
	Ldb               int    `json:"ldb"`
	Ldd               int    `json:"ldd"`
	// AlignBytes are the alignments of A, B and D (at most 256), which the
	// heuristic's candidates depend on.
	AlignBytes     [3]int `json:"align_bytes"`
	WorkspaceBytes int    `json:"workspace_bytes"`
}

// GemmChoice is one shape's tuned algorithm and how it was found.
type GemmChoice struct {
	Key  GemmKey   `json:"key"`
	Algo [8]uint64 `json:"algo"` // cublasLtMatmulAlgo_t
	// AlgoWorkspaceBytes is the workspace the algorithm needs.
	AlgoWorkspaceBytes int `json:"algo_workspace_bytes"`
	// Index is the algorithm's place in the heuristic's list (0: its best).
	Index int `json:"index"`
	// Candidates is how many algorithms were timed.
	Candidates int `json:"candidates"`
	// MedianUs is each candidate's median time in µs, in heuristic order
	// (CPU times on the emulated device: Emulated).
	MedianUs []float64 `json:"median_us"`
	// CheckRelErr is ref.RelErr of the chosen algorithm's output against
	// cublasGemmEx's on the same inputs.
	CheckRelErr float64 `json:"check_rel_err"`
	Emulated    bool    `json:"emulated"`
	// FromCache says the choice was read from Path rather than timed.
	FromCache bool   `json:"-"`
	Path      string `json:"-"`
}

// gemmCacheEntry is the file: the format, the choice's sha256 and the choice.
type gemmCacheEntry struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Choice json.RawMessage `json:"choice"`
}

// GemmCacheDir is where the tuned choices of a cubin cache directory live
// (cacheDir "" is kernels.DefaultCacheDir, as for the cubins).
func GemmCacheDir(cacheDir string) (string, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = kernels.DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	return filepath.Join(cacheDir, "gemm-lt"), nil
}

// gemmEntryPath is key's file in dir: a hash of the key, so that every
// field of it (the GPU's name included) picks a different file.
func gemmEntryPath(dir string, key GemmKey) string {
	b, _ := json.Marshal(key) // a struct of strings and ints: never fails
	sum := sha256.Sum256(b)
	return filepath.Join(dir, hex.EncodeToString(sum[:12])+".json")
}

// maxGemmEntryBytes bounds an entry (one is about 1 KiB): a file padded
// past it, or a FIFO or device in its place, is noted and tuned again at
// once, never read whole or waited on.
const maxGemmEntryBytes = 1 << 20

// loadGemmChoice reads key's entry. A missing entry is (nil, nil); one
// that cannot be trusted is an error saying why (the caller notes it and
// tunes again).
func loadGemmChoice(dir string, key GemmKey) (*GemmChoice, error) {
	path := gemmEntryPath(dir, key)
	data, err := input.ReadFile(path, maxGemmEntryBytes, "a gemm-lt cache entry")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var e gemmCacheEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%s: not a cache entry: %w", path, err)
	}
	if e.Format != gemmCacheFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", path, e.Format, gemmCacheFormat)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, e.Choice); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if sum := sha256.Sum256(compact.Bytes()); hex.EncodeToString(sum[:]) != e.SHA256 {
		return nil, fmt.Errorf("%s: checksum mismatch", path)
	}
	var c GemmChoice
	dec := json.NewDecoder(bytes.NewReader(e.Choice))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Key != key {
		return nil, fmt.Errorf("%s: written for another GPU, cuBLASLt or shape (%+v)", path, c.Key)
	}
	if c.Index < 0 || c.Index >= c.Candidates || len(c.MedianUs) != c.Candidates {
		return nil, fmt.Errorf("%s: algorithm %d of %d candidates with %d times", path, c.Index, c.Candidates, len(c.MedianUs))
	}
	c.FromCache, c.Path = true, path
	return &c, nil
}

// storeGemmChoice writes c's entry whole (a temporary file, then a rename);
// the checksum is the sha256 of the choice's compact JSON.
func storeGemmChoice(dir string, c *GemmChoice) (string, error) {
	choice, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(choice)
	data, err := json.Marshal(gemmCacheEntry{Format: gemmCacheFormat, SHA256: hex.EncodeToString(sum[:]), Choice: choice})
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create gemm cache %s: %w", dir, err)
	}
	path := gemmEntryPath(dir, c.Key)
	return path, kernels.WriteAtomic(path, append(data, '\n'))
}
