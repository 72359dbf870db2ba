package cuda

// #cgo CFLAGS: -I${SRCDIR}/../include
// #include <stdlib.h>
// #include <string.h>
// #include "shim.h"
// #include "stepbench_op.h"
//
// static uint32_t sb_op_abi(void *fn) { return ((uint32_t (*)(void))fn)(); }
// static int sb_op_get(void *fn, const char *op, stepbench_op_table *t, char *err, size_t n) {
// 	return ((int (*)(const char *, stepbench_op_table *, char *, size_t))fn)(op, t, err, n);
// }
// static int sb_op_workspace(stepbench_op_table *t, stepbench_op_call *c, uint64_t *bytes) {
// 	if (t->workspace_bytes == NULL) { *bytes = 0; return 0; }
// 	return t->workspace_bytes(c, bytes);
// }
// static int sb_op_run(stepbench_op_table *t, stepbench_op_call *c) { return t->run(c); }
// // sb_op_ptr stores a device address in a void * field (Go may not make
// // an unsafe.Pointer of an integer).
// static void sb_op_ptr(void **dst, unsigned long long addr) { *dst = (void *)(uintptr_t)addr; }
import "C"

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"unsafe"
)

// OpABIVersion is the STEPBENCH_OP_ABI_VERSION of include/stepbench_op.h
// this stepbench speaks.
const OpABIVersion = uint32(C.STEPBENCH_OP_ABI_VERSION)

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
// major against ours; every error names the file.
func OpenOpLibrary(path string) (*OpLibrary, error) {
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, fmt.Errorf("op library %s: %w", path, err)
	}
	lib, err := openLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("op library %s: %w", path, err)
	}
	abi, get := lib.symbol("stepbench_op_abi_version"), lib.symbol("stepbench_op_get")
	if abi == nil || get == nil {
		lib.close()
		return nil, fmt.Errorf("op library %s: exports no stepbench_op_abi_version and stepbench_op_get (see include/stepbench_op.h)", path)
	}
	l := &OpLibrary{lib: lib, Path: path, SHA256: sum, ABI: uint32(C.sb_op_abi(abi)), get: get}
	if l.ABI>>16 != OpABIVersion>>16 {
		lib.close()
		return nil, fmt.Errorf("op library %s: built for stepbench_op ABI %d.%d, this stepbench speaks %d.%d",
			path, l.ABI>>16, l.ABI&0xffff, OpABIVersion>>16, OpABIVersion&0xffff)
	}
	return l, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
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
const opErrorBytes = 1024

// opMaxDims bounds a tensor's rank in the ABI's scratch.
const opMaxDims = 4

// Op is one op of a library, with the C memory its calls are made in
// (reused: every call comes from the CUDA thread, one at a time).
type Op struct {
	lib     *OpLibrary
	op      string
	name    string
	table   *C.stepbench_op_table
	call    *C.stepbench_op_call
	tensors *C.stepbench_tensor // STEPBENCH_OP_MAX_TENSORS of them
	dims    *C.int64_t          // per tensor: opMaxDims shape, then opMaxDims strides
	errBuf  *C.char
	cOp     *C.char
}

// Op looks op up in the library (stepbench_op_get); call it on the CUDA
// thread with the context current.
func (l *OpLibrary) Op(op string) (*Op, error) {
	o := &Op{lib: l, op: op}
	o.table = (*C.stepbench_op_table)(C.calloc(1, C.size_t(unsafe.Sizeof(C.stepbench_op_table{}))))
	o.call = (*C.stepbench_op_call)(C.calloc(1, C.size_t(unsafe.Sizeof(C.stepbench_op_call{}))))
	o.tensors = (*C.stepbench_tensor)(C.calloc(C.STEPBENCH_OP_MAX_TENSORS, C.size_t(unsafe.Sizeof(C.stepbench_tensor{}))))
	o.dims = (*C.int64_t)(C.calloc(C.STEPBENCH_OP_MAX_TENSORS*2*opMaxDims, 8))
	o.errBuf = (*C.char)(C.calloc(opErrorBytes, 1))
	o.cOp = C.CString(op)
	if rc := C.sb_op_get(l.get, o.cOp, o.table, o.errBuf, opErrorBytes); rc != 0 {
		err := fmt.Errorf("op library %s: op %s: stepbench_op_get returned %d: %s", l.Path, op, int(rc), o.message())
		o.free()
		return nil, err
	}
	if o.table.run == nil {
		o.free()
		return nil, fmt.Errorf("op library %s: op %s: its table has no run function", l.Path, op)
	}
	if o.table.name != nil {
		o.name = C.GoString(o.table.name)
	}
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

func (o *Op) message() string {
	msg := C.GoString(o.errBuf)
	if msg == "" {
		return "(no message)"
	}
	return msg
}

// OpDType is an operand's element type.
type OpDType int

// The element types of the ops' operands.
const (
	OpBF16 OpDType = iota
	OpF32
	OpI32
)

// OpTensor is one operand: a device pointer (0 for an absent optional
// one) and its shape, compact row-major.
type OpTensor struct {
	Ptr   DevPtr
	DType OpDType
	Shape []int64
}

// OpArgs is one call of an op.
type OpArgs struct {
	Tensors        []OpTensor
	StartPos       int64
	Eps            float32
	Capturing      bool
	Workspace      DevPtr
	WorkspaceBytes int
}

// fill writes a into the op's C call structure.
func (o *Op) fill(s *Stream, a OpArgs) error {
	if len(a.Tensors) > C.STEPBENCH_OP_MAX_TENSORS {
		return fmt.Errorf("op %s: %d tensors, the ABI holds %d", o.op, len(a.Tensors), C.STEPBENCH_OP_MAX_TENSORS)
	}
	tensors := unsafe.Slice(o.tensors, C.STEPBENCH_OP_MAX_TENSORS)
	dims := unsafe.Slice(o.dims, C.STEPBENCH_OP_MAX_TENSORS*2*opMaxDims)
	for i, t := range a.Tensors {
		if len(t.Shape) > opMaxDims {
			return fmt.Errorf("op %s: tensor %d has %d dimensions, at most %d", o.op, i, len(t.Shape), opMaxDims)
		}
		shape, strides := dims[i*2*opMaxDims:], dims[i*2*opMaxDims+opMaxDims:]
		stride := int64(1)
		for d := len(t.Shape) - 1; d >= 0; d-- {
			shape[d], strides[d] = C.int64_t(t.Shape[d]), C.int64_t(stride)
			stride *= t.Shape[d]
		}
		ct := &tensors[i]
		*ct = C.stepbench_tensor{}
		C.sb_op_ptr(&ct.data, C.ulonglong(t.Ptr))
		ct.device = C.stepbench_device{device_type: C.STEPBENCH_DEVICE_CUDA, device_id: C.int32_t(s.ctx.ordinal)}
		if t.Ptr != 0 {
			ct.ndim = C.int32_t(len(t.Shape))
			ct.shape, ct.strides = &shape[0], &strides[0]
		}
		switch t.DType {
		case OpBF16:
			ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_BFLOAT, bits: 16, lanes: 1}
		case OpF32:
			ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_FLOAT, bits: 32, lanes: 1}
		case OpI32:
			ct.dtype = C.stepbench_dtype{code: C.STEPBENCH_DTYPE_INT, bits: 32, lanes: 1}
		}
	}
	c := o.call
	*c = C.stepbench_op_call{}
	c.abi_version, c.struct_bytes = C.uint32_t(OpABIVersion), C.uint32_t(unsafe.Sizeof(C.stepbench_op_call{}))
	c.op, c.num_tensors, c.tensors = o.cOp, C.int32_t(len(a.Tensors)), o.tensors
	c.stream = unsafe.Pointer(s.stream)
	C.sb_op_ptr(&c.workspace, C.ulonglong(a.Workspace))
	c.workspace_bytes = C.uint64_t(a.WorkspaceBytes)
	c.start_pos, c.eps = C.int64_t(a.StartPos), C.float(a.Eps)
	if a.Capturing {
		c.capturing = 1
	}
	c.error, c.error_bytes = o.errBuf, opErrorBytes
	*o.errBuf = 0
	return nil
}

// WorkspaceBytes asks the library how much workspace a needs.
func (o *Op) WorkspaceBytes(s *Stream, a OpArgs) (int, error) {
	if err := o.fill(s, a); err != nil {
		return 0, err
	}
	var bytes C.uint64_t
	if rc := C.sb_op_workspace(o.table, o.call, &bytes); rc != 0 {
		return 0, fmt.Errorf("op library %s: op %s: workspace_bytes returned %d: %s", o.lib.Path, o.op, int(rc), o.message())
	}
	return int(bytes), nil
}

// Run enqueues one call on s.
func (o *Op) Run(s *Stream, a OpArgs) error {
	if err := o.fill(s, a); err != nil {
		return err
	}
	if rc := C.sb_op_run(o.table, o.call); rc != 0 {
		return fmt.Errorf("op library %s: op %s: run returned %d: %s", o.lib.Path, o.op, int(rc), o.message())
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
