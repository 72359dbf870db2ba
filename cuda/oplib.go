package cuda

// #cgo CFLAGS: -I${SRCDIR}/../include
// #include <stdlib.h>
// #include <string.h>
// #include "shim.h"
// #include "crash.h"
// #include "stepbench_op.h"
//
// // Every call into the library runs with a crash label (crash.h): a fault
// // inside it is named by the library, the op and the call. A label the
// // caller set already (the probe's, LabelCrashes) is kept.
// static uint32_t sb_op_abi(void *fn, const char *label) {
// 	const char *outer = sb_crash_label; if (outer == NULL) sb_crash_label = label;
// 	uint32_t v = ((uint32_t (*)(void))fn)();
// 	sb_crash_label = outer; return v;
// }
// static int sb_op_get(void *fn, const char *op, stepbench_op_table *t, char *err, size_t n, const char *label) {
// 	const char *outer = sb_crash_label; if (outer == NULL) sb_crash_label = label;
// 	int rc = ((int (*)(const char *, stepbench_op_table *, char *, size_t))fn)(op, t, err, n);
// 	sb_crash_label = outer; return rc;
// }
// static int sb_op_workspace(stepbench_op_table *t, stepbench_op_call *c, uint64_t *bytes, const char *label) {
// 	if (t->workspace_bytes == NULL) { *bytes = 0; return 0; }
// 	const char *outer = sb_crash_label; if (outer == NULL) sb_crash_label = label;
// 	int rc = t->workspace_bytes(c, bytes);
// 	sb_crash_label = outer; return rc;
// }
// static int sb_op_run(stepbench_op_table *t, stepbench_op_call *c, const char *label) {
// 	const char *outer = sb_crash_label; if (outer == NULL) sb_crash_label = label;
// 	int rc = t->run(c);
// 	sb_crash_label = outer; return rc;
// }
// static int sb_op_plan(stepbench_op_table *t, stepbench_op_call *c, const char *label) {
// 	const char *outer = sb_crash_label; if (outer == NULL) sb_crash_label = label;
// 	int rc = t->plan(c);
// 	sb_crash_label = outer; return rc;
// }
// static int sb_op_has_plan(stepbench_op_table *t) { return t->plan != NULL; }
// // sb_op_ptr stores a device address in a void * field (Go may not make
// // an unsafe.Pointer of an integer).
// static void sb_op_ptr(void **dst, unsigned long long addr) { *dst = (void *)(uintptr_t)addr; }
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"unsafe"

	"stepbench/internal/input"
)

// OpABIVersion is the STEPBENCH_OP_ABI_VERSION of include/stepbench_op.h
// this stepbench speaks.
const OpABIVersion = uint32(C.STEPBENCH_OP_ABI_VERSION)

// FormatABI prints an ABI version as major.minor.
func FormatABI(v uint32) string { return fmt.Sprintf("%d.%d", v>>16, v&0xffff) }

// OpLibrary is a shared library implementing ops through the C ABI of
// include/stepbench_op.h (an "op library", --op OP=PATH). It is opened once
// and never closed: its code may be captured in CUDA graphs.
type OpLibrary struct {
	lib    *library
	Path   string
	SHA256 string // of the file, hex
	ABI    uint32 // the library's stepbench_op_abi_version()
	get    unsafe.Pointer
}

// OpenOpLibrary dlopens path, hashes its bytes and checks its ABI version's
// major against ours; every error names the file. A library of another
// major version is bad input (input.Bad: exit code 2), refused in one line
// that names it with its sha256 and both versions. It installs the crash
// handler first (InstallCrashHandler): every call into the library is
// labelled, so that a fault in it names the library, the op and the call.
func OpenOpLibrary(path string) (*OpLibrary, error) {
	if err := InstallCrashHandler(); err != nil {
		return nil, fmt.Errorf("op library %s: %w", path, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, input.Bad(fmt.Errorf("op library %s: %w", path, err))
	}
	leave := watch(LibraryLoad, callText("op library "+path+": its load (dlopen: its constructors; stepbench_op_abi_version)"))
	defer leave()
	lib, err := openLibrary(path)
	if err != nil {
		// dlerror's text quotes the file: a hostile one can hold escapes.
		return nil, input.Bad(fmt.Errorf("op library %s: %s", path, Sanitize(err.Error(), 2048)))
	}
	abi, get := lib.symbol("stepbench_op_abi_version"), lib.symbol("stepbench_op_get")
	if abi == nil || get == nil {
		lib.close()
		return nil, input.Bad(fmt.Errorf("op library %s: exports no stepbench_op_abi_version and stepbench_op_get (see include/stepbench_op.h)", path))
	}
	l := &OpLibrary{lib: lib, Path: path, SHA256: sum, ABI: uint32(C.sb_op_abi(abi, crashLabel(path, "", "stepbench_op_abi_version"))), get: get}
	if l.ABI>>16 != OpABIVersion>>16 {
		lib.close()
		return nil, input.Bad(fmt.Errorf("op library %s (sha256 %s): built for stepbench_op ABI %s, this stepbench speaks ABI %s: rebuild it against include/stepbench_op.h (docs/byok.md, \"From ABI 1 to ABI 2\")",
			path, sum, FormatABI(l.ABI), FormatABI(OpABIVersion)))
	}
	return l, nil
}

func fileSHA256(path string) (string, error) {
	f, err := input.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// opErrorBytes is the size of the error buffer a library writes into.
const opErrorBytes = 4096

// opMaxDims bounds a tensor's rank in the ABI's scratch.
const opMaxDims = 4

// opMaxTensors is STEPBENCH_OP_MAX_TENSORS.
const opMaxTensors = int(C.STEPBENCH_OP_MAX_TENSORS)

// Op is one op of a library, with the C memory its calls are made in
// (reused: every call comes from the CUDA thread, one at a time).
type Op struct {
	lib     *OpLibrary
	op      string
	name    string
	caps    OpCaps
	table   *C.stepbench_op_table
	call    *C.stepbench_op_call
	tensors *C.stepbench_tensor // opMaxTensors of them
	dims    *C.int64_t          // per tensor: opMaxDims shape, then opMaxDims strides
	errBuf  *C.char
	cOp     *C.char
	host    []unsafe.Pointer // C copies of a plan call's host tensors, freed after it
	// labels name the calls for the crash handler (crashLabel), made once
	// and kept for the process's life; texts name them for the Watcher,
	// launched the op for the stream's last launch.
	runLabel, planLabel, workspaceLabel *C.char
	runText, planText, workspaceText    fmt.Stringer
	launched                            string
}

// Op looks op up in the library (stepbench_op_get); call it on the CUDA
// thread with the context current.
func (l *OpLibrary) Op(op string) (*Op, error) {
	o := &Op{lib: l, op: op}
	o.table = (*C.stepbench_op_table)(C.calloc(1, C.size_t(unsafe.Sizeof(C.stepbench_op_table{}))))
	o.call = (*C.stepbench_op_call)(C.calloc(1, C.size_t(unsafe.Sizeof(C.stepbench_op_call{}))))
	o.tensors = (*C.stepbench_tensor)(C.calloc(C.size_t(opMaxTensors), C.size_t(unsafe.Sizeof(C.stepbench_tensor{}))))
	o.dims = (*C.int64_t)(C.calloc(C.size_t(opMaxTensors*2*opMaxDims), 8))
	o.errBuf = (*C.char)(C.calloc(opErrorBytes, 1))
	o.cOp = C.CString(op)
	o.table.struct_bytes = C.uint32_t(unsafe.Sizeof(C.stepbench_op_table{}))
	o.runLabel, o.planLabel, o.workspaceLabel = crashLabel(l.Path, op, "run"), crashLabel(l.Path, op, "plan"), crashLabel(l.Path, op, "workspace_bytes")
	what := "op library " + l.Path + ": " + op + "'s "
	o.runText, o.planText, o.workspaceText = callText(what+"run"), callText(what+"plan"), callText(what+"workspace_bytes")
	o.launched = "op library " + l.Path + "'s " + op
	leave := watch(LibraryLoad, callText(what+"stepbench_op_get"))
	defer leave()
	if rc := C.sb_op_get(l.get, o.cOp, o.table, o.errBuf, opErrorBytes, crashLabel(l.Path, op, "stepbench_op_get")); rc != 0 {
		err := input.Bad(fmt.Errorf("op library %s: op %s: stepbench_op_get returned %d: %s", l.Path, op, int(rc), o.message()))
		o.free()
		return nil, err
	}
	if o.table.run == nil {
		o.free()
		return nil, input.Bad(fmt.Errorf("op library %s: op %s: its table has no run function", l.Path, op))
	}
	if o.table.name != nil {
		o.name = Sanitize(C.GoString(o.table.name), 256)
	}
	o.caps = capsOf(&o.table.caps)
	return o, nil
}

func (o *Op) free() {
	for _, p := range []unsafe.Pointer{unsafe.Pointer(o.table), unsafe.Pointer(o.call), unsafe.Pointer(o.tensors),
		unsafe.Pointer(o.dims), unsafe.Pointer(o.errBuf), unsafe.Pointer(o.cOp)} {
		C.free(p)
	}
}

// Name is the library's description of the op's implementation.
func (o *Op) Name() string { return o.name }

// Library is the library the op came from.
func (o *Op) Library() *OpLibrary { return o.lib }

// Caps is what the op declares it takes (stepbench_op_caps).
func (o *Op) Caps() OpCaps { return o.caps }

// HasPlan reports whether the op has a plan entry point.
func (o *Op) HasPlan() bool { return C.sb_op_has_plan(o.table) != 0 }

// message is the library's error text, made fit for a terminal
// (Sanitize: one line, no escape sequence).
func (o *Op) message() string {
	msg := C.GoString(o.errBuf)
	if msg == "" {
		return "(no message)"
	}
	return Sanitize(msg, 2048)
}

// OpDType is an operand's element type.
type OpDType int

// The element types of the ops' operands.
const (
	OpBF16 OpDType = iota
	OpF32
	OpI32
	OpI64
	OpFP8E4M3 // an FP8 cache's bytes (ABI 2.1)
	OpFP8E5M2
)

// OpTensor is one operand: a device pointer (0 for an absent optional
// one, or for a plan call's device tensor, whose shape is still given) or,
// for a plan call's view, host bytes; its shape, and its strides in
// elements (nil: compact row-major).
type OpTensor struct {
	Ptr     DevPtr
	Host    []byte // a host (kDLCPU) tensor's contents; nil for a device tensor
	DType   OpDType
	Shape   []int64
	Strides []int64
	// Absent marks an optional operand that is not passed (ndim 0).
	Absent bool
}

// The KV cache layouts and dtypes (STEPBENCH_KV_*) and the caps' flags.
const (
	OpKVNHD     = uint32(C.STEPBENCH_KV_NHD)
	OpKVHND     = uint32(C.STEPBENCH_KV_HND)
	OpKVBF16    = uint32(C.STEPBENCH_KV_BF16)
	OpKVFP16    = uint32(C.STEPBENCH_KV_FP16)
	OpKVFP8E4M3 = uint32(C.STEPBENCH_KV_FP8_E4M3)
	OpKVFP8E5M2 = uint32(C.STEPBENCH_KV_FP8_E5M2)
	OpCapLSE    = uint32(C.STEPBENCH_CAP_LSE)
)

// The phases of a plan call (STEPBENCH_PHASE_*).
const (
	OpPhaseNone    = int(C.STEPBENCH_PHASE_NONE)
	OpPhasePrefill = int(C.STEPBENCH_PHASE_PREFILL)
	OpPhaseDecode  = int(C.STEPBENCH_PHASE_DECODE)
)

// OpCaps is a KV op's stepbench_op_caps, defaults applied: Layouts and
// DTypes are never 0; PageSizes nil means any page size that is a multiple
// of PageSizeMultiple (1: any).
type OpCaps struct {
	Layouts, DTypes  uint32
	PageSizes        []int
	PageSizeMultiple int
	Flags            uint32
}

func capsOf(c *C.stepbench_op_caps) OpCaps {
	caps := OpCaps{Layouts: uint32(c.kv_layouts), DTypes: uint32(c.kv_dtypes), Flags: uint32(c.flags), PageSizeMultiple: max(1, int(c.page_size_multiple))}
	if caps.Layouts == 0 {
		caps.Layouts = OpKVNHD
	}
	if caps.DTypes == 0 {
		caps.DTypes = OpKVBF16
	}
	n := min(max(int(c.num_page_sizes), 0), int(C.STEPBENCH_OP_MAX_PAGE_SIZES))
	for i := range n {
		caps.PageSizes = append(caps.PageSizes, int(c.page_sizes[i]))
	}
	return caps
}

// TakesPageSize reports whether the caps take pages of ps tokens.
func (c OpCaps) TakesPageSize(ps int) bool {
	if c.PageSizes == nil {
		return ps >= 1 && ps%c.PageSizeMultiple == 0
	}
	for _, p := range c.PageSizes {
		if p == ps {
			return true
		}
	}
	return false
}

// AnyPageSize reports whether the caps take every page size.
func (c OpCaps) AnyPageSize() bool { return c.PageSizes == nil && c.PageSizeMultiple == 1 }

// OpKV is the call's KV fields (the KV ops: rope_kv_write, attn_prefill,
// attn_decode; include/stepbench_op.h).
type OpKV struct {
	Phase                        int
	NumSeqs, NumTokens           int
	Heads, KVHeads, HeadDim      int
	PageSize, NumPages, MaxPages int
	MaxQueryLen, MaxSeqLen       int
	Layout, DType                uint32
	WantLSE                      bool
	SoftmaxScale                 float32
	// QScale is an FP8 cache's attention's query scale (ABI 2.1); 0 else.
	QScale float32
}

// OpArgs is one call of an op.
type OpArgs struct {
	Tensors        []OpTensor
	Eps            float32
	Capturing      bool
	Workspace      DevPtr
	WorkspaceBytes int
	KV             *OpKV // the KV ops' fields; nil for the others
}

// fill writes a into the op's C call structure.
func (o *Op) fill(s *Stream, a OpArgs) error {
	if len(a.Tensors) > opMaxTensors {
		return fmt.Errorf("op %s: %d tensors, the ABI holds %d", o.op, len(a.Tensors), opMaxTensors)
	}
	tensors := unsafe.Slice(o.tensors, opMaxTensors)
	for i, t := range a.Tensors {
		if err := o.fillTensor(&tensors[i], i, t, s.ctx.ordinal); err != nil {
			return err
		}
	}
	c := o.call
	*c = C.stepbench_op_call{}
	c.abi_version, c.struct_bytes = C.uint32_t(OpABIVersion), C.uint32_t(unsafe.Sizeof(C.stepbench_op_call{}))
	c.op, c.num_tensors, c.tensors = o.cOp, C.int32_t(len(a.Tensors)), o.tensors
	c.stream = unsafe.Pointer(s.stream)
	C.sb_op_ptr(&c.workspace, C.ulonglong(a.Workspace))
	c.workspace_bytes = C.uint64_t(a.WorkspaceBytes)
	c.eps = C.float(a.Eps)
	if a.Capturing {
		c.capturing = 1
	}
	if kv := a.KV; kv != nil {
		c.phase, c.num_seqs, c.num_tokens = C.int32_t(kv.Phase), C.int32_t(kv.NumSeqs), C.int32_t(kv.NumTokens)
		c.num_heads, c.num_kv_heads, c.head_dim = C.int32_t(kv.Heads), C.int32_t(kv.KVHeads), C.int32_t(kv.HeadDim)
		c.page_size, c.num_pages, c.max_pages = C.int32_t(kv.PageSize), C.int32_t(kv.NumPages), C.int32_t(kv.MaxPages)
		c.max_query_len, c.max_seq_len = C.int32_t(kv.MaxQueryLen), C.int32_t(kv.MaxSeqLen)
		c.kv_layout, c.kv_dtype = C.uint32_t(kv.Layout), C.uint32_t(kv.DType)
		if kv.WantLSE {
			c.want_lse = 1
		}
		c.softmax_scale = C.float(kv.SoftmaxScale)
		c.q_scale = C.float(kv.QScale)
	}
	c.error, c.error_bytes = o.errBuf, opErrorBytes
	*o.errBuf = 0
	return nil
}

// fillTensor writes operand i into ct: its shape and strides into the op's
// scratch, a host tensor's bytes into C memory freed after the call.
func (o *Op) fillTensor(ct *C.stepbench_tensor, i int, t OpTensor, ordinal int) error {
	if len(t.Shape) > opMaxDims || (t.Strides != nil && len(t.Strides) != len(t.Shape)) {
		return fmt.Errorf("op %s: tensor %d has %d dimensions and %d strides, at most %d", o.op, i, len(t.Shape), len(t.Strides), opMaxDims)
	}
	dims := unsafe.Slice(o.dims, opMaxTensors*2*opMaxDims)
	shape, strides := dims[i*2*opMaxDims:], dims[i*2*opMaxDims+opMaxDims:]
	stride := int64(1)
	for d := len(t.Shape) - 1; d >= 0; d-- {
		shape[d], strides[d] = C.int64_t(t.Shape[d]), C.int64_t(stride)
		if t.Strides != nil {
			strides[d] = C.int64_t(t.Strides[d])
		}
		stride *= t.Shape[d]
	}
	*ct = C.stepbench_tensor{}
	ct.device = C.stepbench_device{device_type: C.STEPBENCH_DEVICE_CUDA, device_id: C.int32_t(ordinal)}
	C.sb_op_ptr(&ct.data, C.ulonglong(t.Ptr))
	if t.Host != nil {
		p := C.malloc(C.size_t(max(len(t.Host), 1)))
		if len(t.Host) > 0 {
			C.memcpy(p, unsafe.Pointer(&t.Host[0]), C.size_t(len(t.Host)))
		}
		o.host = append(o.host, p)
		ct.data, ct.device = p, C.stepbench_device{device_type: C.STEPBENCH_DEVICE_CPU}
	}
	if !t.Absent {
		ct.ndim = C.int32_t(len(t.Shape))
		if len(t.Shape) > 0 {
			ct.shape, ct.strides = &shape[0], &strides[0]
		}
	}
	switch t.DType {
	case OpBF16:
		ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_BFLOAT, bits: 16, lanes: 1}
	case OpF32:
		ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_FLOAT, bits: 32, lanes: 1}
	case OpI32:
		ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_INT, bits: 32, lanes: 1}
	case OpI64:
		ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_INT, bits: 64, lanes: 1}
	case OpFP8E4M3:
		ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_FLOAT8_E4M3FN, bits: 8, lanes: 1}
	case OpFP8E5M2:
		ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_FLOAT8_E5M2, bits: 8, lanes: 1}
	}
	return nil
}

// freeHost frees the C copies of the last call's host tensors.
func (o *Op) freeHost() {
	for _, p := range o.host {
		C.free(p)
	}
	o.host = o.host[:0]
}

// WorkspaceBytes asks the library how much workspace a needs.
func (o *Op) WorkspaceBytes(s *Stream, a OpArgs) (int, error) {
	defer o.freeHost()
	if err := o.fill(s, a); err != nil {
		return 0, err
	}
	var bytes C.uint64_t
	leave := watch(LibraryCall, o.workspaceText)
	rc := C.sb_op_workspace(o.table, o.call, &bytes, o.workspaceLabel)
	leave()
	if rc != 0 {
		return 0, fmt.Errorf("op library %s: op %s: workspace_bytes returned %d: %s", o.lib.Path, o.op, int(rc), o.message())
	}
	return int(bytes), nil
}

// Run enqueues one call on s.
func (o *Op) Run(s *Stream, a OpArgs) error {
	defer o.freeHost()
	if err := o.fill(s, a); err != nil {
		return err
	}
	leave := watch(LibraryCall, o.runText)
	rc := C.sb_op_run(o.table, o.call, o.runLabel)
	leave()
	s.last.Store(&o.launched) // what the stream's work is, should a synchronisation hang
	if rc != 0 {
		return fmt.Errorf("op library %s: op %s: run returned %d: %s", o.lib.Path, o.op, int(rc), o.message())
	}
	return nil
}

// Plan makes one plan call (the op must have one: HasPlan), on the host,
// outside any capture.
func (o *Op) Plan(s *Stream, a OpArgs) error {
	defer o.freeHost()
	if !o.HasPlan() {
		return nil
	}
	if s.Capturing() {
		return fmt.Errorf("op library %s: op %s: plan called inside a capture (a bug of stepbench's)", o.lib.Path, o.op)
	}
	if err := o.fill(s, a); err != nil {
		return err
	}
	leave := watch(LibraryCall, o.planText)
	rc := C.sb_op_plan(o.table, o.call, o.planLabel)
	leave()
	if rc != 0 {
		return fmt.Errorf("op library %s: op %s: plan returned %d: %s", o.lib.Path, o.op, int(rc), o.message())
	}
	return nil
}

// OpTensorLayout is the size of stepbench_tensor and the offsets of its
// fields (data, device, ndim, dtype, shape, strides, byte_offset), for the
// test that holds it to DLPack's DLTensor.
func OpTensorLayout() []uintptr {
	var t C.stepbench_tensor
	return []uintptr{unsafe.Sizeof(t), unsafe.Offsetof(t.data), unsafe.Offsetof(t.device), unsafe.Offsetof(t.ndim),
		unsafe.Offsetof(t.dtype), unsafe.Offsetof(t.shape), unsafe.Offsetof(t.strides), unsafe.Offsetof(t.byte_offset)}
}

// opABILayout is the size and field offsets of the ABI's other structures,
// for the test that holds ABI 2's layout fixed.
func opABILayout() map[string][]uintptr {
	var c C.stepbench_op_call
	var t C.stepbench_op_table
	var p C.stepbench_op_caps
	return map[string][]uintptr{
		"call": {unsafe.Sizeof(c), unsafe.Offsetof(c.abi_version), unsafe.Offsetof(c.struct_bytes), unsafe.Offsetof(c.op),
			unsafe.Offsetof(c.num_tensors), unsafe.Offsetof(c.tensors), unsafe.Offsetof(c.stream), unsafe.Offsetof(c.workspace),
			unsafe.Offsetof(c.workspace_bytes), unsafe.Offsetof(c.eps), unsafe.Offsetof(c.capturing), unsafe.Offsetof(c.phase),
			unsafe.Offsetof(c.num_seqs), unsafe.Offsetof(c.num_tokens), unsafe.Offsetof(c.num_heads), unsafe.Offsetof(c.num_kv_heads),
			unsafe.Offsetof(c.head_dim), unsafe.Offsetof(c.page_size), unsafe.Offsetof(c.num_pages), unsafe.Offsetof(c.max_pages),
			unsafe.Offsetof(c.max_query_len), unsafe.Offsetof(c.max_seq_len), unsafe.Offsetof(c.kv_layout), unsafe.Offsetof(c.kv_dtype),
			unsafe.Offsetof(c.want_lse), unsafe.Offsetof(c.softmax_scale), unsafe.Offsetof(c.error), unsafe.Offsetof(c.error_bytes),
			unsafe.Offsetof(c.q_scale)},
		"table": {unsafe.Sizeof(t), unsafe.Offsetof(t.struct_bytes), unsafe.Offsetof(t.abi_version), unsafe.Offsetof(t.name),
			unsafe.Offsetof(t.workspace_bytes), unsafe.Offsetof(t.run), unsafe.Offsetof(t.plan), unsafe.Offsetof(t.caps)},
		"caps": {unsafe.Sizeof(p), unsafe.Offsetof(p.kv_layouts), unsafe.Offsetof(p.kv_dtypes), unsafe.Offsetof(p.num_page_sizes),
			unsafe.Offsetof(p.page_size_multiple), unsafe.Offsetof(p.page_sizes), unsafe.Offsetof(p.flags)},
	}
}
