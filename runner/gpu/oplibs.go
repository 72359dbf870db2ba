package gpu

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"stepbench/cuda"
	"stepbench/kernels"
)

// The ops an op library may replace (--op OP=PATH; include/stepbench_op.h
// defines each one's operands).
const (
	OpLinear  = "linear"
	OpNorm    = "add_rmsnorm"
	OpSiluMul = "silu_mul"
)

// ReplaceableOps lists the ops --op takes, sorted.
func ReplaceableOps() []string {
	ops := []string{OpLinear, kernels.OpAttnPrefill, kernels.OpAttnDecode, kernels.OpRope, OpNorm, OpSiluMul, kernels.OpArgmax}
	sort.Strings(ops)
	return ops
}

// ParseOps reads "op=path" items (--op attn_decode=./lib.so); an unknown op,
// an op given twice or an empty path is an error naming the choices.
func ParseOps(items []string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range items {
		op, path, ok := strings.Cut(item, "=")
		switch {
		case !ok || path == "":
			return nil, fmt.Errorf("%q: want OP=PATH.so (ops: %s)", item, strings.Join(ReplaceableOps(), ", "))
		case !slices.Contains(ReplaceableOps(), op):
			return nil, fmt.Errorf("%q: %s is not an op a library can replace (ops: %s)", item, op, strings.Join(ReplaceableOps(), ", "))
		case out[op] != "":
			return nil, fmt.Errorf("%q: %s is already given (%s)", item, op, out[op])
		}
		out[op] = path
	}
	return out, nil
}

// OpLibraryInfo names the library that runs an op.
type OpLibraryInfo struct {
	Op, Path, SHA256, Name string
	ABI                    uint32
}

// opLibs are the ops of a Kernels that libraries replace, and the
// workspace their calls share. Copies of a Kernels (With) share it.
type opLibs struct {
	ops map[string]*cuda.Op
	ws  opWorkspace
}

// opWorkspace is the scratch memory op libraries ask for: grown outside
// captures, never inside one; replaced buffers are kept until Close (a
// captured graph may still point at them).
type opWorkspace struct {
	ctx     *cuda.Context
	ptr     cuda.DevPtr
	bytes   int
	retired []cuda.DevPtr
}

func (w *opWorkspace) get(s *cuda.Stream, need int, who string) (cuda.DevPtr, error) {
	if need <= w.bytes {
		return w.ptr, nil
	}
	if s.Capturing() {
		return 0, fmt.Errorf("%s: needs %d bytes of workspace inside a CUDA graph capture, %d were reserved before it (its workspace_bytes must depend on the shapes only)", who, need, w.bytes)
	}
	p, err := w.ctx.Alloc(need)
	if err != nil {
		return 0, fmt.Errorf("%s: workspace of %d bytes: %w", who, need, err)
	}
	if w.ptr != 0 {
		w.retired = append(w.retired, w.ptr)
	}
	w.ptr, w.bytes = p, need
	return p, nil
}

func (w *opWorkspace) close() error {
	var errs []error
	for _, p := range append(w.retired, w.ptr) {
		if p != 0 {
			errs = append(errs, w.ctx.Free(p))
		}
	}
	w.retired, w.ptr, w.bytes = nil, 0, 0
	return errors.Join(errs...)
}

// WithOps returns k with the ops of libs (op → library path) run by those
// libraries (each opened once, its ops looked up on this thread, with
// ctx current) and what they are.
func (k *Kernels) WithOps(ctx *cuda.Context, libs map[string]string) (*Kernels, []OpLibraryInfo, error) {
	if len(libs) == 0 {
		return k, nil, nil
	}
	c := *k
	c.libs = &opLibs{ops: map[string]*cuda.Op{}, ws: opWorkspace{ctx: ctx}}
	opened := map[string]*cuda.OpLibrary{}
	var infos []OpLibraryInfo
	ops := make([]string, 0, len(libs))
	for op := range libs {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		path := libs[op]
		lib := opened[path]
		if lib == nil {
			var err error
			if lib, err = cuda.OpenOpLibrary(path); err != nil {
				return nil, nil, err
			}
			opened[path] = lib
		}
		o, err := lib.Op(op)
		if err != nil {
			return nil, nil, err
		}
		c.libs.ops[op] = o
		infos = append(infos, OpLibraryInfo{Op: op, Path: path, SHA256: lib.SHA256, Name: o.Name(), ABI: lib.ABI})
	}
	return &c, infos, nil
}

// opLib is the library op that replaces op, or nil.
func (k *Kernels) opLib(op string) *cuda.Op {
	if k.libs == nil {
		return nil
	}
	return k.libs.ops[op]
}

// Replaces says whether a library runs op.
func (k *Kernels) Replaces(op string) bool { return k.opLib(op) != nil }

// libLabel names the library of op in a check ("attention decode [op library libattn.so]"), "" when none.
func (k *Kernels) libLabel(op string) string {
	if o := k.opLib(op); o != nil {
		return fmt.Sprintf(" [op library %s]", filepath.Base(o.Library().Path))
	}
	return ""
}

// runLib makes one call of a library op: its workspace, then the call.
func (k *Kernels) runLib(s *cuda.Stream, o *cuda.Op, op string, args cuda.OpArgs) error {
	who := fmt.Sprintf("%s: op library %s", op, o.Library().Path)
	args.Capturing = s.Capturing()
	need, err := o.WorkspaceBytes(s, args)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if need > 0 {
		if args.Workspace, err = k.libs.ws.get(s, need, who); err != nil {
			return err
		}
		args.WorkspaceBytes = need
	}
	if err := o.Run(s, args); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func bf16T(p cuda.DevPtr, shape ...int) cuda.OpTensor { return opTensor(p, cuda.OpBF16, shape) }
func f32T(p cuda.DevPtr, shape ...int) cuda.OpTensor  { return opTensor(p, cuda.OpF32, shape) }
func i32T(p cuda.DevPtr, shape ...int) cuda.OpTensor  { return opTensor(p, cuda.OpI32, shape) }

func opTensor(p cuda.DevPtr, dt cuda.OpDType, shape []int) cuda.OpTensor {
	s := make([]int64, len(shape))
	for i, d := range shape {
		s[i] = int64(d)
	}
	return cuda.OpTensor{Ptr: p, DType: dt, Shape: s}
}

// LibLinear is out[m,n] = x[m,k]·w[n,k]ᵀ by the op library that replaces
// linear; without one it is an error (Linear is linear version 2's or 3's).
func (k *Kernels) LibLinear(s *cuda.Stream, out, x, w cuda.DevPtr, m, n, kd int) error {
	o := k.opLib(OpLinear)
	if o == nil {
		return errors.New("linear: no op library replaces it (the built-in GEMM is cuBLAS, in the backend)")
	}
	c := argCheck{op: OpLinear}
	c.count("m", m)
	c.positive("n", n)
	c.positive("k", kd)
	c.pointer("out", out, 2)
	c.pointer("x", x, 2)
	c.pointer("w", w, 2)
	if err := c.err(); err != nil || m == 0 {
		return err
	}
	return k.runLib(s, o, OpLinear, cuda.OpArgs{Tensors: []cuda.OpTensor{bf16T(out, m, n), bf16T(x, m, kd), bf16T(w, n, kd)}})
}

// closeLibs frees the libraries' workspace (the libraries stay loaded).
func (k *Kernels) closeLibs() error {
	if k.libs == nil {
		return nil
	}
	return k.libs.ws.close()
}
