package cuda

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// NCCL is an opened NCCL library (libnccl.so.2): communicators among GPUs of
// one process (one locked OS thread and context per GPU) or of several
// processes, and the collectives tensor parallelism needs.
type NCCL struct {
	lib      *library
	api      ncclAPI
	version  int
	emulated string
}

type ncclAPI struct {
	getVersion, getErrorString, getLastError unsafe.Pointer
	getUniqueID, commInitRank, commDestroy   unsafe.Pointer
	commAbort, commGetAsyncError             unsafe.Pointer
	groupStart, groupEnd                     unsafe.Pointer
	allReduce, allGather, broadcast          unsafe.Pointer
}

func (a *ncclAPI) slots() []symbolSlot {
	return []symbolSlot{
		{name: "ncclGetVersion", dst: &a.getVersion},
		{name: "ncclGetErrorString", dst: &a.getErrorString},
		{name: "ncclGetLastError", dst: &a.getLastError, optional: true}, // NCCL 2.13+
		{name: "ncclGetUniqueId", dst: &a.getUniqueID},
		{name: "ncclCommInitRank", dst: &a.commInitRank},
		{name: "ncclCommDestroy", dst: &a.commDestroy},
		{name: "ncclCommAbort", dst: &a.commAbort},                 // NCCL 2.4+
		{name: "ncclCommGetAsyncError", dst: &a.commGetAsyncError}, // NCCL 2.4+
		{name: "ncclGroupStart", dst: &a.groupStart},
		{name: "ncclGroupEnd", dst: &a.groupEnd},
		{name: "ncclAllReduce", dst: &a.allReduce},
		{name: "ncclAllGather", dst: &a.allGather},
		{name: "ncclBroadcast", dst: &a.broadcast},
	}
}

// ncclSoname is NCCL's ABI-stable name.
const ncclSoname = "libnccl.so.2"

// ncclResultNames are ncclResult_t's names, for errors.
var ncclResultNames = map[int]string{
	0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
	4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
}

// ncclSpec finds NCCL as NVRTC and cuBLAS are found; PyTorch's wheels bring
// it (nvidia/nccl/lib) where no system NCCL is installed.
var ncclSpec = librarySpec{
	kind:      "NCCL",
	envVar:    "STEPBENCH_NCCL",
	sonames:   []string{ncclSoname},
	wheelDirs: []string{"nvidia/nccl/lib"},
}

// OpenNCCL opens explicitPath, else $STEPBENCH_NCCL, else libnccl.so.2 from
// $STEPBENCH_CUDA_LIBS (only there, when set), else the first that opens of
// the loader path, $CUDA_HOME/lib64, /usr/local/cuda*/lib64 and the Python
// wheels' site-packages/nvidia/nccl/lib.
func OpenNCCL(explicitPath string) (*NCCL, error) {
	plan, err := ncclSpec.plan(explicitPath, hostSearchEnv())
	if err != nil {
		return nil, fmt.Errorf("NCCL: %w", err)
	}
	var lib *library
	var errs []error
	for _, path := range plan.tries() {
		if lib, err = openLibrary(path); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if lib == nil {
		return nil, fmt.Errorf("NCCL: none of %v opened (searched %v): %w", plan.tries(), plan.searched, errors.Join(errs...))
	}
	n := &NCCL{lib: lib}
	if err := lib.resolve(n.api.slots()); err != nil {
		lib.close()
		return nil, fmt.Errorf("NCCL: %w", err)
	}
	var v C.int
	if err := n.check(C.sb_ncclGetVersion(n.api.getVersion, &v), nil, "ncclGetVersion"); err != nil {
		lib.close()
		return nil, err
	}
	n.version = int(v)
	n.emulated = lib.describeEmulator()
	return n, nil
}

// Path is the file or soname NCCL was opened from.
func (n *NCCL) Path() string { return n.lib.path }

// Version is NCCL's version code, major*10000 + minor*100 + patch (2.9 and later).
func (n *NCCL) Version() int { return n.version }

// Emulated describes the emulated NCCL (cuda/emu), "" for the real one.
func (n *NCCL) Emulated() string { return n.emulated }

// check turns an ncclResult_t into an *Error; comm (may be nil) adds NCCL's
// last error message where the library has one.
func (n *NCCL) check(code C.ncclResult_t, comm C.ncclComm_t, call string, args ...any) error {
	if code == 0 {
		return nil
	}
	if len(args) > 0 {
		call = fmt.Sprintf(call, args...)
	}
	name, ok := ncclResultNames[int(code)]
	if !ok {
		name = fmt.Sprintf("ncclResult(%d)", int(code))
	}
	e := &Error{Call: call, Code: int(code), Name: name}
	if n.api.getLastError != nil {
		if msg := C.sb_ncclGetLastError(n.api.getLastError, comm); msg != nil {
			e.Detail = strings.TrimSpace(C.GoString(msg))
		}
	}
	return e
}

// NCCLUniqueID names a communicator: one rank makes it, every rank gets it
// (by value, over whatever channel joins them) and passes it to InitRank.
type NCCLUniqueID [128]byte

// UniqueID makes a new communicator id.
func (n *NCCL) UniqueID() (NCCLUniqueID, error) {
	var id NCCLUniqueID
	buf := C.malloc(C.size_t(len(id)))
	defer C.free(buf)
	if err := n.check(C.sb_ncclGetUniqueId(n.api.getUniqueID, buf), nil, "ncclGetUniqueId"); err != nil {
		return id, err
	}
	copy(id[:], C.GoBytes(buf, C.int(len(id))))
	return id, nil
}

// NCCLComm is one rank of a communicator. Like every CUDA object it belongs
// to the goroutine (locked OS thread) whose context was current at InitRank;
// only Abort and AsyncError may be called from any goroutine.
type NCCLComm struct {
	n            *NCCL
	comm         C.ncclComm_t // set by InitRank, never changed; valid while state is commLive
	rank, nranks int
	state        atomic.Int32 // commLive, commDestroyed or commAborted
	// calls is held for reading by a call while it is inside NCCL, and for
	// writing by Destroy and, when it is free at once, by Abort.
	calls sync.RWMutex
}

// The states of an NCCLComm.
const (
	commLive int32 = iota
	commDestroyed
	commAborted
)

// ErrNCCLAborted is what every call on a communicator returns after Abort.
var ErrNCCLAborted = errors.New("the NCCL communicator was aborted (ncclCommAbort)")

// InitRank joins rank of an nranks communicator on the calling thread's
// current device. Every rank must call it (concurrently, from its own
// thread): it returns when all have joined.
func (n *NCCL) InitRank(nranks int, id NCCLUniqueID, rank int) (*NCCLComm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("ncclCommInitRank: rank %d of %d", rank, nranks)
	}
	buf := C.CBytes(id[:])
	defer C.free(buf)
	c := &NCCLComm{n: n, rank: rank, nranks: nranks}
	if err := n.check(C.sb_ncclCommInitRank(n.api.commInitRank, &c.comm, C.int(nranks), buf, C.int(rank)), nil,
		"ncclCommInitRank(rank %d of %d)", rank, nranks); err != nil {
		return nil, err
	}
	return c, nil
}

// Rank and Size are this rank and the communicator's rank count.
func (c *NCCLComm) Rank() int { return c.rank }
func (c *NCCLComm) Size() int { return c.nranks }

// enter admits one call into NCCL, holding c.calls for reading (the caller
// releases it with c.calls.RUnlock when NCCL returns); a destroyed or
// aborted communicator is an error and nothing is held.
func (c *NCCLComm) enter(call string) error {
	c.calls.RLock()
	switch c.state.Load() {
	case commLive:
		return nil
	case commAborted:
		c.calls.RUnlock()
		return fmt.Errorf("%s: rank %d of %d: %w", call, c.rank, c.nranks, ErrNCCLAborted)
	}
	c.calls.RUnlock()
	return fmt.Errorf("%s: rank %d of %d: the communicator was destroyed (ncclCommDestroy)", call, c.rank, c.nranks)
}

// Destroy leaves the communicator; after Abort, or a first Destroy, it does
// nothing (ncclCommAbort already freed it).
func (c *NCCLComm) Destroy() error {
	c.calls.Lock()
	defer c.calls.Unlock()
	if !c.state.CompareAndSwap(commLive, commDestroyed) {
		return nil
	}
	return c.n.check(C.sb_ncclCommDestroy(c.n.api.commDestroy, c.comm), nil, "ncclCommDestroy(rank %d)", c.rank)
}

// Abort ends the communicator now (ncclCommAbort): NCCL stops this rank's
// operations that can no longer complete, such as a collective waiting for a
// rank that failed, and frees the communicator. Unlike every other method it
// may be called from any goroutine, while the owning one waits in a
// collective or a stream synchronisation: ending such a wait from another
// thread is what NCCL's abort is for (NCCL user guide, "Error handling and
// communicator abort" and "Fault tolerance"; API reference, ncclCommAbort;
// NVIDIA/nccl#140, where it came; PyTorch's ProcessGroupNCCL watchdog thread
// aborts that way). Within a node every rank must abort, not only one
// (NVIDIA/nccl#863): runner.Group does. Afterwards
// Destroy does nothing and every other call returns ErrNCCLAborted; a
// second Abort, or one after Destroy, does nothing.
func (c *NCCLComm) Abort() error {
	if !c.state.CompareAndSwap(commLive, commAborted) {
		return nil
	}
	// A call of the owning goroutine may be inside NCCL at this moment, even
	// blocked there (NCCL connects the peers of a collective at its first
	// call, waiting for them): abort alongside it rather than wait forever.
	// NCCL's thread-safety rules do not promise that this is safe (the abort
	// frees what the call may still use); the usual case, an owner waiting
	// on its stream, holds no lock and is the one NCCL's abort is for.
	if c.calls.TryLock() {
		defer c.calls.Unlock()
	}
	return c.n.check(C.sb_ncclCommAbort(c.n.api.commAbort, c.comm), nil, "ncclCommAbort(rank %d of %d)", c.rank, c.nranks)
}

// AsyncError is the error the communicator hit outside any call, nil while
// there is none: NCCL's network connections fail asynchronously, as when a
// rank in another process went away (NVIDIA/nccl#279: not for certain),
// and this rank's operations then never complete until it is aborted. Like
// Abort it may be called from any goroutine: it is meant to be polled
// while the owning one waits (ncclCommGetAsyncError; NVIDIA/nccl#140). A
// destroyed or aborted communicator has none to report.
func (c *NCCLComm) AsyncError() error {
	if c.enter("ncclCommGetAsyncError") != nil {
		return nil
	}
	defer c.calls.RUnlock()
	var async C.ncclResult_t
	call := fmt.Sprintf("ncclCommGetAsyncError(rank %d of %d)", c.rank, c.nranks)
	if err := c.n.check(C.sb_ncclCommGetAsyncError(c.n.api.commGetAsyncError, c.comm, &async), nil, call); err != nil {
		return err
	}
	if async == ncclInProgress {
		return nil
	}
	return c.n.check(async, c.comm, call)
}

// ncclInProgress is a non-blocking communicator's "not done yet", no error.
const ncclInProgress = 7

// NCCLDataType and NCCLRedOp are ncclDataType_t and ncclRedOp_t values.
type (
	NCCLDataType int
	NCCLRedOp    int
)

const (
	NCCLInt8     NCCLDataType = 0
	NCCLInt32    NCCLDataType = 2
	NCCLFloat32  NCCLDataType = 7
	NCCLBfloat16 NCCLDataType = 9

	NCCLSum NCCLRedOp = 0
	NCCLMax NCCLRedOp = 2
)

func (t NCCLDataType) String() string {
	switch t {
	case NCCLInt8:
		return "int8"
	case NCCLInt32:
		return "int32"
	case NCCLUint64:
		return "uint64"
	case NCCLFloat32:
		return "float32"
	case NCCLBfloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("ncclDataType(%d)", int(t))
}

// AllReduce enqueues recv = op over ranks of send (count elements) on s.
func (c *NCCLComm) AllReduce(send, recv DevPtr, count int, dt NCCLDataType, op NCCLRedOp, s *Stream) error {
	if count < 0 {
		return fmt.Errorf("ncclAllReduce: negative count %d", count)
	}
	if err := c.enter("ncclAllReduce"); err != nil {
		return err
	}
	defer c.calls.RUnlock()
	return c.n.check(C.sb_ncclAllReduce(c.n.api.allReduce, C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(count),
		C.int(dt), C.int(op), c.comm, s.stream), c.comm, "ncclAllReduce(%d %s, rank %d of %d)", count, dt, c.rank, c.nranks)
}

// AllGather enqueues recv[r*count:(r+1)*count] = send of rank r, for every r, on s.
func (c *NCCLComm) AllGather(send, recv DevPtr, count int, dt NCCLDataType, s *Stream) error {
	if count < 0 {
		return fmt.Errorf("ncclAllGather: negative count %d", count)
	}
	if err := c.enter("ncclAllGather"); err != nil {
		return err
	}
	defer c.calls.RUnlock()
	return c.n.check(C.sb_ncclAllGather(c.n.api.allGather, C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(count),
		C.int(dt), c.comm, s.stream), c.comm, "ncclAllGather(%d %s per rank, rank %d of %d)", count, dt, c.rank, c.nranks)
}

// Broadcast enqueues recv = root's send (count elements) on every rank, on s.
func (c *NCCLComm) Broadcast(send, recv DevPtr, count int, dt NCCLDataType, root int, s *Stream) error {
	if err := c.enter("ncclBroadcast"); err != nil {
		return err
	}
	defer c.calls.RUnlock()
	return c.n.check(C.sb_ncclBroadcast(c.n.api.broadcast, C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(count),
		C.int(dt), C.int(root), c.comm, s.stream), c.comm, "ncclBroadcast(%d %s from rank %d, rank %d of %d)", count, dt, root, c.rank, c.nranks)
}

// GroupStart and GroupEnd bracket collectives one thread issues for several
// ranks (unused when every rank has its own thread).
func (n *NCCL) GroupStart() error {
	return n.check(C.sb_ncclGroup(n.api.groupStart), nil, "ncclGroupStart")
}
func (n *NCCL) GroupEnd() error { return n.check(C.sb_ncclGroup(n.api.groupEnd), nil, "ncclGroupEnd") }
