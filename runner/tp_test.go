package runner

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"stepbench/kernels/ref"
)

// cpuComm is an in-memory communicator of cpu backends, for tests: each
// collective is a barrier, then every rank computes the result from all
// ranks' inputs in rank order (bf16 sums in fp32, rounded once, as NCCL
// and the emulated NCCL do), then a barrier. Like ncclCommAbort, abort
// wakes every rank waiting in a barrier with an error, and every later
// barrier fails at once; remote, when set, is a failure of ranks in
// another process that the ranks here learn only by asking
// (CollectivesError, as ncclCommGetAsyncError).
type cpuComm struct {
	mu      sync.Mutex
	cond    *sync.Cond
	size    int
	arrived int
	gen     int
	aborted error
	remote  error
	bf16    [][]uint16
	u64     [][]uint64
}

func newCPUComm(size int) *cpuComm {
	c := &cpuComm{size: size, bf16: make([][]uint16, size), u64: make([][]uint64, size)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *cpuComm) barrier() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted != nil {
		return c.aborted
	}
	gen := c.gen
	if c.arrived++; c.arrived == c.size {
		c.arrived, c.gen = 0, c.gen+1
		c.cond.Broadcast()
		return nil
	}
	for gen == c.gen && c.aborted == nil {
		c.cond.Wait()
	}
	if gen == c.gen {
		return c.aborted
	}
	return nil
}

func (c *cpuComm) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aborted = errCollectivesAborted
	c.cond.Broadcast()
}

var errCollectivesAborted = errors.New("the in-memory collectives were aborted")

// cpuRank is a cpu backend that is one rank of a cpuComm.
type cpuRank struct {
	*CPU
	comm *cpuComm
	rank int
}

func (r *cpuRank) AllReduceSum(buf Buffer, n int) error {
	data := buf.(*cpuBuffer).b16[:n]
	r.comm.bf16[r.rank] = slices.Clone(data)
	if err := r.comm.barrier(); err != nil {
		return err
	}
	for i := range data {
		var sum float32
		for _, part := range r.comm.bf16 {
			sum += ref.BF16ToF32(part[i])
		}
		data[i] = ref.F32ToBF16(sum)
	}
	return r.comm.barrier()
}

// CollectivesError makes the rank a runner.CollectivesWatcher.
func (r *cpuRank) CollectivesError() error {
	r.comm.mu.Lock()
	defer r.comm.mu.Unlock()
	return r.comm.remote
}

// AbortCollectives makes the rank a runner.Aborter.
func (r *cpuRank) AbortCollectives() error {
	r.comm.abort()
	return nil
}

func keysOf(b Buffer, rows int) []uint64 {
	i32 := b.(*cpuBuffer).i32[:2*rows]
	return unsafe.Slice((*uint64)(unsafe.Pointer(&i32[0])), rows)
}

func (r *cpuRank) ArgmaxKeys(keys, logits Buffer, rows, vocab, vocabStart int) error {
	ref.ArgmaxKeys(keysOf(keys, rows), logits.(*cpuBuffer).b16, rows, vocab, vocabStart)
	return nil
}

func (r *cpuRank) AllReduceMaxKeys(keys Buffer, rows int) error {
	k := keysOf(keys, rows)
	r.comm.u64[r.rank] = slices.Clone(k)
	if err := r.comm.barrier(); err != nil {
		return err
	}
	for i := range k {
		for _, part := range r.comm.u64 {
			k[i] = max(k[i], part[i])
		}
	}
	return r.comm.barrier()
}

func (r *cpuRank) KeyIndex(out, keys Buffer, rows int) error {
	ref.KeyIndex(out.(*cpuBuffer).i32, keysOf(keys, rows), rows)
	return nil
}

// cpuGroup is a Group of size cpu ranks.
func cpuGroup(t *testing.T, cfg Config, size int, seed uint64) *Group {
	t.Helper()
	comm := newCPUComm(size)
	ranks := make([]int, size)
	for i := range ranks {
		ranks[i] = i
	}
	g, err := NewGroup(cfg, size, ranks, RankBackends{
		Open: func(rank int) (Backend, error) { return &cpuRank{CPU: NewCPU(), comm: comm, rank: rank}, nil },
		Join: func(int, Backend) error { return nil },
	}, WeightSource{Seed: seed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// generate runs batch prompts through prefill and steps decode steps on t,
// returning every step's greedy tokens and logits.
func generate(t *testing.T, target interface {
	Begin(batch, inputLen, outputLen int, prompts []int32) error
	Prefill() error
	Decode() error
	NextTokens() ([]int32, error)
	Logits() ([][]float32, error)
}, batch int, prompts []int32, steps int) ([][]int32, [][][]float32) {
	t.Helper()
	if err := target.Begin(batch, len(prompts)/batch, steps+1, prompts); err != nil {
		t.Fatal(err)
	}
	var tokens [][]int32
	var logits [][][]float32
	for s := 0; s <= steps; s++ {
		step := target.Prefill
		if s > 0 {
			step = target.Decode
		}
		if err := step(); err != nil {
			t.Fatal(err)
		}
		ids, err := target.NextTokens()
		if err != nil {
			t.Fatal(err)
		}
		l, err := target.Logits()
		if err != nil {
			t.Fatal(err)
		}
		tokens, logits = append(tokens, ids), append(logits, l)
	}
	return tokens, logits
}

// The same model whatever the rank count: 2 and 4 cpu ranks give llama-tiny
// the tokens and the logits of one, to the design's tolerance of a whole
// forward pass (2e-2: the ranks' partial sums are rounded to bf16 before the
// all-reduce adds them).
func TestGroupMatchesOneRankOnCPU(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	prompts := []int32{5, 17, 300, 4095, 2, 9, 1000, 77, 12, 3, 3, 3}
	one := tinyEngine(t)
	wantTokens, wantLogits := generate(t, one, 2, prompts, 3)
	for _, size := range []int{2, 4} {
		gotTokens, gotLogits := generate(t, cpuGroup(t, cfg, size, 7), 2, prompts, 3)
		worst := 0.0
		for s := range wantTokens {
			if !slices.Equal(gotTokens[s], wantTokens[s]) {
				t.Errorf("%d ranks, step %d: tokens %v, one rank %v", size, s, gotTokens[s], wantTokens[s])
			}
			for b := range wantLogits[s] {
				rel, err := ref.RelErr(gotLogits[s][b], wantLogits[s][b])
				if err != nil || rel > 2e-2 {
					t.Errorf("%d ranks, step %d row %d: logits rel err %.3g (%v)", size, s, b, rel, err)
				}
				worst = max(worst, rel)
			}
		}
		t.Logf("%d cpu ranks: tokens equal, largest logits rel err %.2e", size, worst)
	}
}

func TestTPLayouts(t *testing.T) {
	cfg, _ := Preset("llama-3-70b")
	l, err := cfg.TPLayout(5, 8)
	if err != nil {
		t.Fatal(err)
	}
	want := TPLayout{Rank: 5, Size: 8, HeadStart: 40, Heads: 8, KVHeadStart: 5, KVHeads: 1,
		InterStart: 5 * 3584, Inter: 3584, VocabStart: 5 * 128256 / 8, Vocab: 128256 / 8}
	if l != want {
		t.Errorf("70B rank 5 of 8: %+v, want %+v", l, want)
	}
	tiny, _ := Preset("llama-tiny") // 4 heads over 2 KV heads
	for rank, kv := range []int{0, 0, 1, 1} {
		l, err := tiny.TPLayout(rank, 4)
		if err != nil || l.KVHeadStart != kv || l.KVHeads != 1 || l.Heads != 1 || l.HeadStart != rank {
			t.Errorf("tiny rank %d of 4: %+v %v; want q head %d reading KV head %d", rank, l, err, rank, kv)
		}
	}
	odd := tiny
	odd.VocabSize = 10
	var total int
	for rank := 0; rank < 4; rank++ {
		l, _ := odd.TPLayout(rank, 4)
		if l.VocabStart != total || l.Vocab < 2 || l.Vocab > 3 {
			t.Errorf("vocab 10 over 4 ranks: rank %d %+v", rank, l)
		}
		total += l.Vocab
	}
	if total != 10 {
		t.Errorf("vocab shards sum to %d", total)
	}
}

func TestCheckTPRefuses(t *testing.T) {
	tiny, _ := Preset("llama-tiny")
	for _, tc := range []struct {
		size int
		want string
	}{
		{3, "does not divide llama-tiny's 4 attention heads"},
		{8, "does not divide llama-tiny's 4 attention heads"},
		{0, "must be at least 1"},
	} {
		if err := tiny.CheckTP(tc.size); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("size %d: %v, want %q", tc.size, err, tc.want)
		}
	}
	odd := tiny
	odd.NumAttentionHeads, odd.NumKeyValueHeads = 6, 3
	if err := odd.CheckTP(2); err == nil || !strings.Contains(err.Error(), "3 key/value heads") {
		t.Errorf("6 heads over 3 KV heads, 2 ranks: %v", err)
	}
	if _, err := NewEngineRank(tiny, TPLayout{Size: 2}, NewCPU(), WeightSource{}, nil); err == nil {
		t.Error("a rank with a layout that is not the model's was accepted")
	}
	lay, _ := tiny.TPLayout(0, 2)
	if _, err := NewEngineRank(tiny, lay, NewCPU(), WeightSource{}, nil); err == nil || !strings.Contains(err.Error(), "no collectives") {
		t.Errorf("a cpu rank without collectives: %v", err)
	}
}

// A rank's memory estimate is its share: 70B's weights over 8 GPUs are an
// eighth of the layers, the whole embedding and an eighth of lm_head.
func TestEstimateMemoryRank(t *testing.T) {
	cfg, _ := Preset("llama-3-70b")
	full := EstimateMemory(cfg, 1, 1024, 1040)
	l, _ := cfg.TPLayout(0, 8)
	rank := EstimateMemoryRank(cfg, l, 1, 1024, 1040)
	h, V := int64(cfg.HiddenSize), int64(cfg.VocabSize)
	embed, norms := 2*V*h, 2*h*(2*int64(cfg.NumHiddenLayers)+1) // replicated on every rank
	split := full.WeightBytes - embed - norms - 4*int64(cfg.HeadDim)/2
	want := embed + norms + split/8 + 4*int64(cfg.HeadDim)/2
	if rank.WeightBytes != want {
		t.Errorf("rank weights %d, want %d", rank.WeightBytes, want)
	}
	if rank.KVCacheBytes*8 != full.KVCacheBytes {
		t.Errorf("rank KV cache %d, want an eighth of %d", rank.KVCacheBytes, full.KVCacheBytes)
	}
	if got := EstimateMemoryRank(cfg, cfg.FullLayout(), 1, 1024, 1040); got != full {
		t.Errorf("the full layout's estimate %+v differs from EstimateMemory's %+v", got, full)
	}
}

// A rank's cost: an eighth of the weights read (norms aside), and the ring
// all-reduce traffic, 2(N−1)/N × the activation bytes, twice per layer,
// plus the argmax keys' all-reduce.
func TestCostTP(t *testing.T) {
	cfg, _ := Preset("llama-3-70b")
	one, err := DecodeCost(cfg, 4, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rank, err := DecodeCostTP(cfg, 8, 4, 1024)
	if err != nil {
		t.Fatal(err)
	}
	const N = 8.0
	act := 4.0 * float64(cfg.HiddenSize) * 2 // batch 4 tokens × hidden, bf16
	wantComm := 2*float64(cfg.NumHiddenLayers)*2*(N-1)/N*act + 2*(N-1)/N*4*8
	if rank.CommBytes != wantComm || rank.TPSize != 8 {
		t.Errorf("comm bytes %v (tp %d), want %v", rank.CommBytes, rank.TPSize, wantComm)
	}
	if r := rank.WeightBytes * N / one.WeightBytes; r < 0.999 || r > 1.001 {
		t.Errorf("rank weight bytes %v × 8 / one GPU's %v = %v, want 1", rank.WeightBytes, one.WeightBytes, r)
	}
	if one.CommBytes != 0 || one.TPSize != 0 {
		t.Errorf("one GPU: comm %v tp %d", one.CommBytes, one.TPSize)
	}
	ops := map[string]bool{}
	for _, o := range rank.Ops {
		ops[o.Op] = true
	}
	for _, op := range []string{"attn_all_reduce", "mlp_all_reduce", "argmax_all_reduce"} {
		if !ops[op] {
			t.Errorf("no %s among %v", op, rank.Ops)
		}
	}
}
