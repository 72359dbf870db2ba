package gpu

import (
	"errors"
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
	"stepbench/runner"
)

// The cuda backend as one rank of a tensor-parallel group (runner.Collectives):
// NCCL all-reduces on the backend's stream, which a decode graph captures
// like any kernel, and the vocabulary-parallel argmax of kernels/tp.cu.

var (
	_ runner.Collectives        = (*Backend)(nil)
	_ runner.Aborter            = (*Backend)(nil)
	_ runner.CollectivesWatcher = (*Backend)(nil)
)

// JoinGroup makes the backend rank `rank` of an NCCL communicator of size
// ranks named by id. Every rank must call it at the same time, each from
// its backend's goroutine: it returns when all have joined.
func (c *Backend) JoinGroup(nccl *cuda.NCCL, id cuda.NCCLUniqueID, rank, size int) error {
	if c.comm.Load() != nil {
		return errors.New("join group: already a rank of a group")
	}
	comm, err := nccl.InitRank(size, id, rank)
	if err != nil {
		return fmt.Errorf("join group as rank %d of %d: %w", rank, size, err)
	}
	c.comm.Store(comm)
	return nil
}

func (c *Backend) communicator(op string) (*cuda.NCCLComm, error) {
	comm := c.comm.Load()
	if comm == nil {
		return nil, fmt.Errorf("%s: the backend is no rank of a tensor-parallel group (JoinGroup)", op)
	}
	return comm, nil
}

// AbortCollectives aborts the backend's communicator (ncclCommAbort), from
// any goroutine: a collective of this rank that waits for a rank that
// failed ends, and so does a stream synchronisation behind it; every later
// collective fails at once (cuda.ErrNCCLAborted). Over several nodes the
// other processes' NCCL may report it to their ranks as an asynchronous
// error (CollectivesError). A backend that has not joined a group (or has
// left it) has nothing to abort.
func (c *Backend) AbortCollectives() error {
	comm := c.comm.Load()
	if comm == nil {
		return nil
	}
	if err := comm.Abort(); err != nil {
		return fmt.Errorf("abort collectives: %w", err)
	}
	return nil
}

// AllReduceSum sums buf's first n bf16 elements over the ranks, in place.
func (c *Backend) AllReduceSum(buf runner.Buffer, n int) error {
	comm, err := c.communicator("all-reduce")
	if err != nil {
		return err
	}
	p, err := dev(buf, runner.BF16, n, "all-reduce", "buf", false)
	if err != nil {
		return err
	}
	if err := comm.AllReduce(p, p, n, cuda.NCCLBfloat16, cuda.NCCLSum, c.stream); err != nil {
		return fmt.Errorf("all-reduce: %w", c.rootCause(err))
	}
	return nil
}

// ArgmaxKeys writes each row's argmax key of this rank's vocabulary slice.
func (c *Backend) ArgmaxKeys(keys, logits runner.Buffer, rows, vocab, vocabStart int) error {
	o := operands{op: "argmax_keys"}
	pKeys := o.get(keys, runner.I32, 2*rows, "keys")
	pLogits := o.get(logits, runner.BF16, rows*vocab, "logits")
	if o.err != nil {
		return o.err
	}
	return c.set.ArgmaxKeys(c.stream, pKeys, pLogits, rows, vocab, vocabStart)
}

// AllReduceMaxKeys takes each row's largest key over the ranks, in place.
func (c *Backend) AllReduceMaxKeys(keys runner.Buffer, rows int) error {
	comm, err := c.communicator("argmax all-reduce")
	if err != nil {
		return err
	}
	p, err := dev(keys, runner.I32, 2*rows, "argmax all-reduce", "keys", false)
	if err != nil {
		return err
	}
	if err := comm.AllReduce(p, p, rows, cuda.NCCLUint64, cuda.NCCLMax, c.stream); err != nil {
		return fmt.Errorf("argmax all-reduce: %w", c.rootCause(err))
	}
	return nil
}

// KeyIndex turns each row's key into its token index.
func (c *Backend) KeyIndex(out, keys runner.Buffer, rows int) error {
	o := operands{op: "key_index"}
	pOut := o.get(out, runner.I32, rows, "out")
	pKeys := o.get(keys, runner.I32, 2*rows, "keys")
	if o.err != nil {
		return o.err
	}
	return c.set.KeyIndex(c.stream, pOut, pKeys, rows)
}

// CollectivesError is the communicator's asynchronous error
// (ncclCommGetAsyncError), nil while there is none or before JoinGroup;
// callable from any goroutine.
func (c *Backend) CollectivesError() error {
	comm := c.comm.Load()
	if comm == nil {
		return nil
	}
	return comm.AsyncError()
}

// leaveGroup destroys the communicator (Close calls it); an aborted one is
// already gone, and Destroy does nothing.
func (c *Backend) leaveGroup() error {
	comm := c.comm.Swap(nil)
	if comm == nil {
		return nil
	}
	return comm.Destroy()
}

// ArgmaxKeys: keys[r] (uint64) = ref.ArgmaxKeys of logits[r, :] whose column
// j is the vocabulary's index vocabStart+j.
func (k *Kernels) ArgmaxKeys(s *cuda.Stream, keys, logits cuda.DevPtr, rows, vocab, vocabStart int) error {
	c := argCheck{op: "argmax_keys"}
	c.count("rows", rows)
	c.positive("vocab", vocab)
	c.count("vocabStart", vocabStart)
	c.require(int64(vocabStart)+int64(vocab) <= 1<<31-1, "vocabStart %d + vocab %d exceeds int32", vocabStart, vocab)
	c.pointer("keys", keys, 8)
	c.pointer("logits", logits, 2)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	vec := aligned16(vocab, logits)
	return k.launch(s, c.op, "argmax_keys", cuda.Dim3{X: uint32(rows), Y: 1, Z: 1},
		cuda.Dim3{X: kernels.ArgmaxThreads, Y: 1, Z: 1}, 0,
		keys, logits, int32(rows), int32(vocab), int32(vocabStart), flag(vec))
}

// KeyIndex: out[r] (int32) = ref.KeyIndex of keys[r].
func (k *Kernels) KeyIndex(s *cuda.Stream, out, keys cuda.DevPtr, rows int) error {
	c := argCheck{op: "key_index"}
	c.count("rows", rows)
	c.pointer("out", out, 4)
	c.pointer("keys", keys, 8)
	if err := c.err(); err != nil || rows == 0 {
		return err
	}
	const threads = 128
	return k.launch(s, c.op, "key_index", cuda.Dim3{X: uint32(kernels.CeilDiv(rows, threads)), Y: 1, Z: 1},
		cuda.Dim3{X: threads, Y: 1, Z: 1}, 0, out, keys, int32(rows))
}
