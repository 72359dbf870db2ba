package dist

import (
	"fmt"
	"hash/fnv"
	"strings"

	"stepbench/runner"
)

// Work is what every node of a multi-node run must do identically: the
// model's shape, the weights, the prompts, the shapes and iterations timed,
// the kernels. Its String is a Job's Work.
type Work struct {
	Model                             runner.Config
	LoadFormat                        string
	Seed                              uint64
	BatchSizes, InputLens, OutputLens []int
	NumIters, WarmupIters             int
	CorrectnessTest                   bool
	Prompts                           [][]int32 // --prompt-ids, compared by hash
	KernelVersions                    string    // "op=v op=v", as kernels.Selection resolves them
	DisableCUDAGraph                  bool
	KVCache                           string // the layout and lengths (spaces become commas in String)
}

// String is the work as "key=value" items separated by spaces, in a fixed
// order, with no quotes or spaces inside a value.
func (w Work) String() string {
	c := w.Model
	ints := func(v []int) string { return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]") }
	return strings.Join([]string{
		fmt.Sprintf("model=%s/h%d/l%d/heads%d/kv%d/v%d/i%d", c.Name, c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads,
			c.NumKeyValueHeads, c.VocabSize, c.IntermediateSize),
		"load-format=" + w.LoadFormat,
		fmt.Sprintf("seed=%d", w.Seed),
		"batch-size=" + ints(w.BatchSizes),
		"input-len=" + ints(w.InputLens),
		"output-len=" + ints(w.OutputLens),
		fmt.Sprintf("num-iters=%d", w.NumIters),
		fmt.Sprintf("num-iters-warmup=%d", w.WarmupIters),
		fmt.Sprintf("correctness-test=%t", w.CorrectnessTest),
		fmt.Sprintf("prompt-ids=%x", promptsHash(w.Prompts)),
		"kernel=" + strings.ReplaceAll(w.KernelVersions, " ", ","),
		fmt.Sprintf("disable-cuda-graph=%t", w.DisableCUDAGraph),
		"kv-cache=" + strings.ReplaceAll(w.KVCache, " ", ","),
	}, " ")
}

// promptsHash is FNV-1a of the prompts' token ids (0 lengths included).
func promptsHash(prompts [][]int32) uint64 {
	h := fnv.New64a()
	for _, p := range prompts {
		fmt.Fprint(h, len(p), p)
	}
	return h.Sum64()
}
