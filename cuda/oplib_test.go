package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"stepbench/internal/input"
)

// stepbench_tensor is laid out as DLPack 1.x's DLTensor on LP64: void *data
// (0), DLDevice {int32 device_type, int32 device_id} (8), int32 ndim (16),
// DLDataType {uint8 code, uint8 bits, uint16 lanes} (20), int64 *shape (24),
// int64 *strides (32), uint64 byte_offset (40); 48 bytes.
func TestOpTensorIsDLTensor(t *testing.T) {
	if got, want := OpTensorLayout(), []uintptr{48, 0, 8, 16, 20, 24, 32, 40}; !slices.Equal(got, want) {
		t.Errorf("stepbench_tensor size and offsets %v, DLTensor's are %v", got, want)
	}
}

func TestOpenOpLibraryErrorsNameTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libnot.so")
	if err := os.WriteFile(path, []byte("no ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Join(t.TempDir(), "missing.so")} {
		if _, err := OpenOpLibrary(p); err == nil || !strings.Contains(err.Error(), "op library "+p) {
			t.Errorf("OpenOpLibrary(%s) = %v, want an error naming it", p, err)
		}
	}
}

// ABI 2's structures keep their layout on LP64 (include/stepbench_op.h):
// a library built against the header and stepbench must agree on every
// offset; a field moved is a new major version.
func TestOpABI2Layout(t *testing.T) {
	want := map[string][]uintptr{
		// size, then abi_version .. error_bytes in the header's order, then
		// 2.1's q_scale appended (a minor bump: every 2.0 offset kept).
		"call": {152, 0, 4, 8, 16, 24, 32, 40, 48, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 96, 100, 104, 108, 112, 116, 120, 128, 136, 144},
		// size, struct_bytes, abi_version, name, workspace_bytes, run, plan, caps.
		"table": {128, 0, 4, 8, 16, 24, 32, 40},
		// size, kv_layouts, kv_dtypes, num_page_sizes, page_size_multiple, page_sizes, flags.
		"caps": {84, 0, 4, 8, 12, 16, 80},
	}
	got := opABILayout()
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("stepbench_op_%s size and offsets %v, want %v", name, got[name], w)
		}
	}
	if OpABIVersion != 2<<16|1 {
		t.Errorf("STEPBENCH_OP_ABI_VERSION = %s, want 2.1", FormatABI(OpABIVersion))
	}
}

// buildFixture compiles one of testdata's C libraries with gcc.
func buildFixture(t *testing.T, src string, defines ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc: %v", err)
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(src, ".c")+".so")
	args := append([]string{"-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-I../include", "-o", out, filepath.Join("testdata", src)}, defines...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	return out
}

// A library built for ABI 1 is refused in one line that names it, its
// sha256 and both versions, marked as bad input (exit code 2).
func TestOpenOpLibraryRefusesABI1(t *testing.T) {
	path := buildFixture(t, "abi1_op.c")
	sum, err := fileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenOpLibrary(path)
	want := "op library " + path + " (sha256 " + sum + "): built for stepbench_op ABI 1.0, this stepbench speaks ABI 2.1"
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") || !input.IsBad(err) {
		t.Errorf("OpenOpLibrary(ABI 1) = %v (bad input %v), want one line starting %q", err, input.IsBad(err), want)
	}
}

// recordedCall runs fn against the record fixture's op and returns the
// description its run or plan wrote into the error.
func recordedCall(t *testing.T, op *Op, fn func() error) string {
	t.Helper()
	err := fn()
	if err == nil {
		t.Fatal("the record fixture returned 0")
	}
	_, desc, ok := strings.Cut(err.Error(), "returned 1: ")
	if !ok {
		t.Fatalf("no description in %v", err)
	}
	return desc
}

// A KV op's call carries the view as the header says: the caches as 4-D
// strided tensors, the table and lengths int32, the slot mapping int64,
// the fields; an absent lse has ndim 0. A plan call has the same tensors
// with the device ones' data NULL and the view on the host (kDLCPU) with
// its values. The table's struct_bytes is set before stepbench_op_get and
// the caps are read back.
func TestOpCallCarriesTheKVView(t *testing.T) {
	g := newGPUEnv(t)
	lib, err := OpenOpLibrary(buildFixture(t, "record_op.c", "-DCAPS_PAGES_48", "-DCAPS_LSE"))
	if err != nil {
		t.Fatal(err)
	}
	op, err := lib.Op("attn_decode")
	if err != nil {
		t.Fatal(err)
	}
	if c := op.Caps(); !slices.Equal(c.PageSizes, []int{48}) || c.Layouts != OpKVNHD || c.DTypes != OpKVBF16 || c.Flags != OpCapLSE ||
		!c.TakesPageSize(48) || c.TakesPageSize(16) || c.AnyPageSize() || !op.HasPlan() {
		t.Errorf("caps %+v, plan %v", c, op.HasPlan())
	}
	dev := g.alloc(t, 1<<12)
	cache := []int64{5, 48, 2, 8}
	tensors := []OpTensor{
		{Ptr: dev, DType: OpBF16, Shape: []int64{2, 4, 8}}, {Ptr: dev, DType: OpBF16, Shape: []int64{2, 4, 8}},
		{Ptr: dev, DType: OpBF16, Shape: cache}, {Ptr: dev, DType: OpBF16, Shape: cache, Strides: []int64{768, 8, 384, 1}},
		{Ptr: dev, DType: OpI32, Shape: []int64{2, 2}}, {Ptr: dev, DType: OpI32, Shape: []int64{2}}, {Ptr: dev, DType: OpI32, Shape: []int64{3}},
		{Ptr: dev, DType: OpI32, Shape: []int64{2}}, {Ptr: dev, DType: OpI64, Shape: []int64{2}}, {DType: OpF32, Shape: []int64{2, 4}, Absent: true},
	}
	kv := &OpKV{NumSeqs: 2, NumTokens: 2, Heads: 4, KVHeads: 2, HeadDim: 8, PageSize: 48, NumPages: 5, MaxPages: 2, MaxQueryLen: 1,
		MaxSeqLen: 96, Layout: OpKVNHD, DType: OpKVBF16, SoftmaxScale: 0.25}
	got := recordedCall(t, op, func() error { return op.Run(g.stream, OpArgs{Tensors: tensors, KV: kv}) })
	for _, want := range []string{"run struct_bytes=152 abi=131073 phase=0 seqs=2 tokens=2 heads=4 kv_heads=2 head_dim=8 page_size=48 num_pages=5 max_pages=2 max_query_len=1 max_seq_len=96 layout=1 dtype=1 want_lse=0 scale_x1e6=250000",
		"|2 dev=2 code=4 bits=16 null=0 ndim=4 shape=5,48,2,8, strides=768,16,8,1,", "|3 dev=2 code=4 bits=16 null=0 ndim=4 shape=5,48,2,8, strides=768,8,384,1,",
		"|4 dev=2 code=0 bits=32 null=0 ndim=2 shape=2,2,", "|8 dev=2 code=0 bits=64 null=0 ndim=1 shape=2,", "|9 dev=2 code=2 bits=32 null=1 ndim=0 shape="} {
		if !strings.Contains(got, want) {
			t.Errorf("run call lacks %q:\n%s", want, got)
		}
	}
	table, seqLens := []int32{3, 1, 4, 7}, []int32{49, 2}
	slots := []int64{150, -1}
	plan := slices.Clone(tensors)
	for i := range plan {
		plan[i].Ptr = 0
	}
	plan[4].Host = unsafe.Slice((*byte)(unsafe.Pointer(&table[0])), 16)
	plan[5].Host = unsafe.Slice((*byte)(unsafe.Pointer(&seqLens[0])), 8)
	plan[8].Host = unsafe.Slice((*byte)(unsafe.Pointer(&slots[0])), 16)
	kv.Phase = OpPhaseDecode
	got = recordedCall(t, op, func() error { return op.Plan(g.stream, OpArgs{Tensors: plan, KV: kv}) })
	for _, want := range []string{"plan struct_bytes=152 abi=131073 phase=2 seqs=2", "|0 dev=2 code=4 bits=16 null=1 ndim=3 shape=2,4,8,",
		"|4 dev=1 code=0 bits=32 null=0 ndim=2 shape=2,2, strides=2,1, values=3,1,4,7,", "|5 dev=1 code=0 bits=32 null=0 ndim=1 shape=2, strides=1, values=49,2,",
		"|8 dev=1 code=0 bits=64 null=0 ndim=1 shape=2, strides=1, values=150,-1,"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan call lacks %q:\n%s", want, got)
		}
	}
}
