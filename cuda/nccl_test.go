package cuda

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
)

// rankEnv is one rank of a test communicator: its thread's context and stream.
type rankEnv struct {
	ctx    *Context
	stream *Stream
	comm   *NCCLComm
}

// joinRank makes rank's context (current on the calling goroutine's locked
// OS thread), stream and communicator; on failure it reports the error and
// returns nil. leave closes the context; the caller destroys the comm.
func joinRank(t *testing.T, drv *Driver, nccl *NCCL, id NCCLUniqueID, rank, ranks int) (r *rankEnv, leave func()) {
	t.Helper()
	r = &rankEnv{}
	leave = func() {}
	var err error
	if r.ctx, err = drv.NewContext(rank); err != nil {
		t.Error(err)
		return nil, leave
	}
	leave = func() { r.ctx.Close() }
	if r.stream, err = r.ctx.NewStream(); err != nil {
		t.Error(err)
		return nil, leave
	}
	if r.comm, err = nccl.InitRank(ranks, id, rank); err != nil {
		t.Error(err)
		return nil, leave
	}
	return r, leave
}

func (r *rankEnv) upload(t *testing.T, vals []float32) DevPtr {
	p, err := r.ctx.Alloc(4 * len(vals))
	if err != nil {
		t.Error(err)
		return 0
	}
	if err := r.stream.CopyHtoD(p, unsafe.Pointer(&vals[0]), 4*len(vals)); err != nil {
		t.Error(err)
	}
	if err := r.stream.Sync(); err != nil {
		t.Error(err)
	}
	return p
}

func (r *rankEnv) download(t *testing.T, p DevPtr, n int) []float32 {
	out := make([]float32, n)
	if err := r.stream.CopyDtoH(unsafe.Pointer(&out[0]), p, 4*n); err != nil {
		t.Error(err)
	}
	if err := r.stream.Sync(); err != nil {
		t.Error(err)
	}
	return out
}

// TestNCCLEmulatedRanks runs 4 ranks of one process, each on its own thread
// and emulated GPU, through all-reduce and all-gather, eagerly and replayed
// from a captured graph. STEPBENCH_EMU_DEVICES is per process: a child runs it.
func TestNCCLEmulatedRanks(t *testing.T) {
	emutest.Use(t)
	if os.Getenv("STEPBENCH_TEST_NCCL") != "ranks" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNCCLEmulatedRanks$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_NCCL=ranks", "STEPBENCH_EMU_DEVICES=4")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	nccl, err := OpenNCCL("")
	if err != nil {
		t.Fatal(err)
	}
	if nccl.Emulated() == "" {
		t.Fatal("not the emulated NCCL")
	}
	drv, err := OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	id, err := nccl.UniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const ranks, n = 4, 1000
	var wg sync.WaitGroup
	for rank := 0; rank < ranks; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r, leave := joinRank(t, drv, nccl, id, rank, ranks)
			defer leave()
			if r == nil {
				return
			}
			defer r.comm.Destroy()
			ncclRankChecks(t, r, rank, ranks, n)
		}()
	}
	wg.Wait()
}

func ncclRankChecks(t *testing.T, r *rankEnv, rank, ranks, n int) {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(rank*n + i)
	}
	send := r.upload(t, vals)
	recv := r.upload(t, make([]float32, n*ranks))
	if err := r.comm.AllReduce(send, recv, n, NCCLFloat32, NCCLSum, r.stream); err != nil {
		t.Error(err)
		return
	}
	for i, v := range r.download(t, recv, n) {
		want := float32(ranks*i) + float32(n*ranks*(ranks-1)/2)
		if v != want {
			t.Errorf("rank %d: all-reduce[%d] = %v, want %v", rank, i, v, want)
			return
		}
	}
	if err := r.comm.AllGather(send, recv, n, NCCLFloat32, r.stream); err != nil {
		t.Error(err)
		return
	}
	for i, v := range r.download(t, recv, n*ranks) {
		if v != float32(i) {
			t.Errorf("rank %d: all-gather[%d] = %v, want %d", rank, i, v, i)
			return
		}
	}
	// Captured: the graph's all-reduce rendezvous again at every replay.
	if err := r.stream.BeginCapture(); err != nil {
		t.Error(err)
		return
	}
	arErr := r.comm.AllReduce(send, recv, n, NCCLFloat32, NCCLMax, r.stream)
	g, err := r.stream.EndCapture()
	if arErr != nil || err != nil {
		t.Errorf("rank %d capture: %v, %v", rank, arErr, err)
		return
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Error(err)
		return
	}
	defer exec.Destroy()
	g.Destroy()
	for range 3 {
		if err := exec.Launch(r.stream); err != nil {
			t.Error(err)
			return
		}
	}
	for i, v := range r.download(t, recv, n) {
		if want := float32((ranks-1)*n + i); v != want {
			t.Errorf("rank %d: replayed max[%d] = %v, want %v", rank, i, v, want)
			return
		}
	}
}

// TestNCCLEmulatedTwoProcesses joins two processes (one emulated GPU each)
// in one communicator: rank 0 writes the unique id to a file, rank 1 reads it.
// After an all-reduce, rank 0 aborts its communicator instead of joining a
// second one, and rank 1's fails naming the abort (the NCCL timeout is 600 s:
// only the abort, through the shared segment, ends rank 1's wait quickly).
func TestNCCLEmulatedTwoProcesses(t *testing.T) {
	emutest.Use(t)
	if rank := os.Getenv("STEPBENCH_TEST_NCCL_RANK"); rank != "" {
		ncclProcessRank(t, rank, os.Getenv("STEPBENCH_TEST_NCCL_ID"))
		return
	}
	idFile := filepath.Join(t.TempDir(), "id")
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for rank := 0; rank < 2; rank++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNCCLEmulatedTwoProcesses$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_NCCL_RANK="+strconv.Itoa(rank), "STEPBENCH_TEST_NCCL_ID="+idFile,
			"STEPBENCH_EMU_NCCL_TIMEOUT_S=600")
		var b strings.Builder
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &b)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil || !strings.Contains(outs[i].String(), "--- PASS") {
			t.Errorf("rank %d: %v\n%s", i, err, outs[i])
		}
	}
}

func ncclProcessRank(t *testing.T, rankText, idFile string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rank, _ := strconv.Atoi(rankText)
	nccl, err := OpenNCCL("")
	if err != nil {
		t.Fatal(err)
	}
	var id NCCLUniqueID
	if rank == 0 {
		if id, err = nccl.UniqueID(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(idFile+".tmp", []byte(hex.EncodeToString(id[:])), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(idFile+".tmp", idFile); err != nil {
			t.Fatal(err)
		}
	} else {
		deadline := time.Now().Add(30 * time.Second)
		for {
			text, err := os.ReadFile(idFile)
			if err == nil {
				raw, _ := hex.DecodeString(string(text))
				copy(id[:], raw)
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no unique id from rank 0")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	drv, err := OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	r := &rankEnv{}
	if r.ctx, err = drv.NewContext(0); err != nil {
		t.Fatal(err)
	}
	defer r.ctx.Close()
	if r.stream, err = r.ctx.NewStream(); err != nil {
		t.Fatal(err)
	}
	if r.comm, err = nccl.InitRank(2, id, rank); err != nil {
		t.Fatal(err)
	}
	defer r.comm.Destroy()
	send := r.upload(t, []float32{float32(rank + 1), 10})
	recv := r.upload(t, []float32{0, 0})
	if err := r.comm.AllReduce(send, recv, 2, NCCLFloat32, NCCLSum, r.stream); err != nil {
		t.Fatal(err)
	}
	if got := r.download(t, recv, 2); fmt.Sprint(got) != "[3 20]" {
		t.Errorf("rank %d: all-reduce across processes = %v, want [3 20]", rank, got)
	}
	if rank == 0 {
		if err := r.comm.Abort(); err != nil {
			t.Errorf("rank 0: abort: %v", err)
		}
		return
	}
	// The abort may come before this all-reduce is enqueued (it fails at
	// once) or while it waits on the stream (it wakes and fails).
	err = r.comm.AllReduce(send, recv, 2, NCCLFloat32, NCCLSum, r.stream)
	if err == nil {
		err = r.stream.Sync()
	}
	const why = "rank 0 aborted the communicator (ncclCommAbort)"
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("rank 1: an all-reduce after rank 0's abort in another process: %v, want an error naming %q", err, why)
	}
}

// TestNCCLEmulatedAbort: rank 1 of 4 in-process ranks never joins their
// all-reduce; its communicator is aborted from another goroutine instead.
// The three others, waiting for it in the all-reduce, fail with the abort
// named (the child's NCCL timeout is 600 s, so only the abort can end their
// wait quickly: a hang shows as the go test timeout); their next
// collective fails at once with ncclRemoteError, their asynchronous error
// is ncclRemoteError; on rank 1, Destroy after Abort does nothing and a
// collective returns ErrNCCLAborted.
func TestNCCLEmulatedAbort(t *testing.T) {
	emutest.Use(t)
	if os.Getenv("STEPBENCH_TEST_NCCL") != "abort" {
		seeded.Expect(t, "ncclCommAbort of a rank that never joins")
		cmd := exec.Command(os.Args[0], "-test.run=^TestNCCLEmulatedAbort$", "-test.v")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_NCCL=abort", "STEPBENCH_EMU_DEVICES=4", "STEPBENCH_EMU_NCCL_TIMEOUT_S=600")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	nccl, err := OpenNCCL("")
	if err != nil {
		t.Fatal(err)
	}
	drv, err := OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	id, err := nccl.UniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const ranks = 4
	comms := make(chan *NCCLComm, 1)       // rank 1's, once joined
	enqueued := make(chan struct{}, ranks) // one per waiting rank
	aborted := make(chan struct{})
	var wg sync.WaitGroup
	for rank := 0; rank < ranks; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			r, leave := joinRank(t, drv, nccl, id, rank, ranks)
			defer leave()
			if r == nil {
				return
			}
			if rank == 1 {
				comms <- r.comm
				<-aborted
				abortedRankChecks(t, r)
				return
			}
			waitingRankChecks(t, r, rank, enqueued)
		}()
	}
	comm := <-comms
	for range ranks - 1 {
		<-enqueued
	}
	if err := comm.Abort(); err != nil {
		t.Errorf("abort rank 1: %v", err)
	}
	close(aborted)
	wg.Wait()
}

// waitingRankChecks: the rank's all-reduce waits for rank 1 until its abort
// ends it; the next collective fails at once.
func waitingRankChecks(t *testing.T, r *rankEnv, rank int, enqueued chan<- struct{}) {
	defer r.comm.Destroy()
	p, err := r.ctx.Alloc(4 * 16)
	if err != nil {
		t.Error(err)
		enqueued <- struct{}{}
		return
	}
	err = r.comm.AllReduce(p, p, 16, NCCLFloat32, NCCLSum, r.stream)
	enqueued <- struct{}{}
	if err != nil {
		t.Errorf("rank %d: all-reduce: %v", rank, err)
		return
	}
	const why = "rank 1 aborted the communicator (ncclCommAbort)"
	if err := r.stream.Sync(); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("rank %d: the all-reduce waiting for an aborted rank ended with %v, want %q", rank, err, why)
	}
	err = r.comm.AllReduce(p, p, 16, NCCLFloat32, NCCLSum, r.stream)
	var ce *Error
	if !errors.As(err, &ce) || ce.Name != "ncclRemoteError" || !strings.Contains(ce.Detail, why) {
		t.Errorf("rank %d: an all-reduce after the abort: %v, want ncclRemoteError naming the abort", rank, err)
	}
	if err := r.comm.AsyncError(); !errors.As(err, &ce) || ce.Name != "ncclRemoteError" {
		t.Errorf("rank %d: asynchronous error after a peer's abort: %v, want ncclRemoteError", rank, err)
	}
}

// abortedRankChecks: on the aborted rank, Abort again and Destroy do
// nothing; a collective is a Go error.
func abortedRankChecks(t *testing.T, r *rankEnv) {
	if err := r.comm.Abort(); err != nil {
		t.Errorf("a second abort: %v", err)
	}
	if err := r.comm.Destroy(); err != nil {
		t.Errorf("destroy after abort: %v", err)
	}
	if err := r.comm.AsyncError(); err != nil {
		t.Errorf("asynchronous error of an aborted communicator: %v, want none", err)
	}
	p, err := r.ctx.Alloc(4 * 16)
	if err != nil {
		t.Error(err)
		return
	}
	if err := r.comm.AllReduce(p, p, 16, NCCLFloat32, NCCLSum, r.stream); !errors.Is(err, ErrNCCLAborted) {
		t.Errorf("all-reduce after abort: %v, want ErrNCCLAborted", err)
	}
}
