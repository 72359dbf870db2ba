package runner

import (
	"errors"
	"fmt"
)

// Tensor parallelism (Megatron-LM's, as SGLang and vLLM run Llama): N ranks,
// one GPU each, every rank holding a slice of each big matrix.
//
//   - qkv_proj and gate_up_proj are column-parallel: rank r computes the q
//     heads, k/v heads and intermediate columns it owns, from the whole
//     (replicated) normed activation;
//   - attention runs on the rank's own heads and KV cache;
//   - o_proj and down_proj are row-parallel: rank r multiplies its slice of
//     the input by its slice of the weight's columns, giving a partial sum of
//     the whole output, which an all-reduce (sum) completes on every rank:
//     two all-reduces per layer, each of tokens × hidden bf16 values;
//   - the embedding, the norms and the residual stream are replicated;
//   - lm_head is vocabulary-parallel: rank r computes the logits of its rows
//     of the vocabulary, reduces each row to one key (its best value and the
//     global index, ordered as ref.Argmax orders them), and an all-reduce
//     (max) of the keys gives every rank the global greedy token.
//
// With more ranks than KV heads, each rank holds the one KV head its q heads
// read (replicated over N / kv_heads ranks, as SGLang does).

// TPLayout is one rank's share of the model.
type TPLayout struct {
	Rank, Size int
	// Query heads [HeadStart, HeadStart+Heads) and KV heads
	// [KVHeadStart, KVHeadStart+KVHeads).
	HeadStart, Heads     int
	KVHeadStart, KVHeads int
	// Intermediate (MLP) columns [InterStart, InterStart+Inter).
	InterStart, Inter int
	// Vocabulary rows of lm_head [VocabStart, VocabStart+Vocab): rank r gets
	// rows r·V/N .. (r+1)·V/N − 1, so the shards differ by one row at most.
	VocabStart, Vocab int
}

// FullLayout is the whole model on one rank (no tensor parallelism).
func (c Config) FullLayout() TPLayout {
	return TPLayout{Rank: 0, Size: 1, Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads,
		Inter: c.IntermediateSize, Vocab: c.VocabSize}
}

// CheckTP says whether the model splits over size ranks: the attention
// heads and the intermediate size must divide by it, and the KV heads must
// divide by it or divide it (then each rank holds one KV head).
func (c Config) CheckTP(size int) error {
	if err := c.Validate(); err != nil {
		return err
	}
	H, KV := c.NumAttentionHeads, c.NumKeyValueHeads
	switch {
	case size < 1:
		return fmt.Errorf("tensor-parallel size %d: must be at least 1", size)
	case H%size != 0:
		return fmt.Errorf("tensor-parallel size %d does not divide %s's %d attention heads", size, c.Name, H)
	case size <= KV && KV%size != 0:
		return fmt.Errorf("tensor-parallel size %d does not divide %s's %d key/value heads", size, c.Name, KV)
	case size > KV && size%KV != 0:
		return fmt.Errorf("tensor-parallel size %d is not a multiple of %s's %d key/value heads", size, c.Name, KV)
	case c.IntermediateSize%size != 0:
		return fmt.Errorf("tensor-parallel size %d does not divide %s's intermediate size %d", size, c.Name, c.IntermediateSize)
	case size > c.VocabSize:
		return fmt.Errorf("tensor-parallel size %d exceeds %s's vocabulary of %d", size, c.Name, c.VocabSize)
	}
	return nil
}

// TPLayout is rank's share of the model split over size ranks.
func (c Config) TPLayout(rank, size int) (TPLayout, error) {
	if err := c.CheckTP(size); err != nil {
		return TPLayout{}, err
	}
	if rank < 0 || rank >= size {
		return TPLayout{}, fmt.Errorf("tensor-parallel rank %d of %d", rank, size)
	}
	H, KV := c.NumAttentionHeads, c.NumKeyValueHeads
	l := TPLayout{Rank: rank, Size: size, Heads: H / size, Inter: c.IntermediateSize / size}
	l.HeadStart, l.InterStart = rank*l.Heads, rank*l.Inter
	if size <= KV {
		l.KVHeads = KV / size
		l.KVHeadStart = rank * l.KVHeads
	} else {
		l.KVHeads, l.KVHeadStart = 1, rank/(size/KV)
	}
	V := c.VocabSize
	l.VocabStart = rank * V / size
	l.Vocab = (rank+1)*V/size - l.VocabStart
	return l, nil
}

// QKVDim is the width of the rank's fused q/k/v output.
func (l TPLayout) QKVDim(headDim int) int { return (l.Heads + 2*l.KVHeads) * headDim }

// Collectives are what a backend adds to be one rank of a tensor-parallel
// group. Every rank makes the same calls in the same order, each on its own
// stream; like the other ops they are enqueued (and captured in a decode
// graph) in order.
type Collectives interface {
	// AllReduceSum replaces buf's first n bf16 elements, on every rank, by
	// their sum over the ranks (fp32 accumulation, rounded once, as NCCL's).
	AllReduceSum(buf Buffer, n int) error
	// ArgmaxKeys writes keys[r] (one uint64 per row, in an I32 buffer of
	// 2×rows) = ref.ArgmaxKey of the best of logits[r, :], whose column j is
	// the vocabulary's index vocabStart+j.
	ArgmaxKeys(keys, logits Buffer, rows, vocab, vocabStart int) error
	// AllReduceMaxKeys replaces each of rows keys by its maximum over the ranks.
	AllReduceMaxKeys(keys Buffer, rows int) error
	// KeyIndex writes out[r] = the index keys[r] holds (ref.KeyIndex).
	KeyIndex(out, keys Buffer, rows int) error
}

// ErrNoCollectives is returned for a tensor-parallel rank on a backend that
// has no collectives (the cpu backend).
var ErrNoCollectives = errors.New("the backend has no collectives for tensor parallelism")
