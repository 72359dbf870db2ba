package runner

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MemoryEstimate is what a run needs on its backend, in bytes, computed from
// shapes before anything is allocated.
type MemoryEstimate struct {
	WeightBytes     int64 `json:"weight_bytes"`
	KVCacheBytes    int64 `json:"kv_cache_bytes"`
	ActivationBytes int64 `json:"activation_bytes"`
}

// Total is the sum of the parts (math.MaxInt64 when it overflows).
func (m MemoryEstimate) Total() int64 {
	return satAdd(m.WeightBytes, m.KVCacheBytes, m.ActivationBytes)
}

// Overflows says the estimate does not fit an int64: some count it
// multiplies is beyond any machine, so the run cannot fit anywhere.
func (m MemoryEstimate) Overflows() bool { return m.Total() == math.MaxInt64 }

// satMul is the product of counts, math.MaxInt64 when it overflows or when a
// factor is negative (a count that overflowed before it came here): the
// estimate's arithmetic saturates so that no input makes it wrap around
// to a small or negative need.
func satMul(factors ...int64) int64 {
	p := int64(1)
	for _, f := range factors {
		if f < 0 {
			return math.MaxInt64
		}
		if f != 0 && p > math.MaxInt64/f {
			p = math.MaxInt64
			continue // a later 0 still makes the product 0
		}
		p *= f
	}
	for _, f := range factors {
		if f == 0 {
			return 0
		}
	}
	return p
}

// satAdd is the sum of counts, saturating like satMul.
func satAdd(terms ...int64) int64 {
	s := int64(0)
	for _, t := range terms {
		if t < 0 || s > math.MaxInt64-t {
			return math.MaxInt64
		}
		s += t
	}
	return s
}

// ParamCount is the number of parameters the model stores (the embedding
// table once when tied); math.MaxInt64 when that overflows.
func (c Config) ParamCount() int64 {
	return c.rankParamCount(c.FullLayout())
}

// EstimateMemory is the memory for batch sequences of up to maxSeq
// positions whose prefill brings tokens rows, matching Engine's allocations.
// Its arithmetic saturates: what overflows is math.MaxInt64 (Overflows),
// which no memory check lets through.
func EstimateMemory(c Config, batch, tokens, maxSeq int) MemoryEstimate {
	return EstimateMemoryRank(c, c.FullLayout(), batch, tokens, maxSeq)
}

// rankParamCount is the number of parameters a rank of layout l stores:
// its slices of the layers and of lm_head, the whole embedding and norms.
func (c Config) rankParamCount(l TPLayout) int64 {
	h, D := int64(c.HiddenSize), int64(c.HeadDim)
	perLayer := satAdd(2*h, satMul(int64(l.QKVDim(c.HeadDim)), h), satMul(h, int64(l.Heads), D), satMul(3, int64(l.Inter), h))
	if c.QKVBias { // Qwen2: q/k/v_proj.bias, the rank's rows
		perLayer = satAdd(perLayer, int64(l.QKVDim(c.HeadDim)))
	}
	if c.QKNorm { // Qwen3: q_norm and k_norm, whole on every rank
		perLayer = satAdd(perLayer, 2*D)
	}
	n := satAdd(satMul(int64(c.NumHiddenLayers), perLayer), h, satMul(int64(c.VocabSize), h))
	if !c.TieWordEmbeddings || l.Vocab != c.VocabSize {
		n = satAdd(n, satMul(int64(l.Vocab), h))
	}
	return n
}

// EstimateMemoryRank is EstimateMemory on one GPU of a tensor-parallel group
// (rank l.Rank of l.Size): its weights, its KV heads' cache and its
// activations, matching NewEngineRank's allocations.
func EstimateMemoryRank(c Config, l TPLayout, batch, tokens, maxSeq int) MemoryEstimate {
	return EstimateMemorySlots(c, l, batch, tokens, satMul(int64(batch), int64(maxSeq)), 0)
}

// FP8Cache is e with its KV cache of FP8 bytes (half the bf16 cache's)
// and its per-layer K and V scales (one float per KV head each).
func (e MemoryEstimate) FP8Cache(c Config, l TPLayout) MemoryEstimate {
	e.KVCacheBytes = satAdd(e.KVCacheBytes/2, satMul(2, 4, int64(c.NumHiddenLayers), int64(l.KVHeads)))
	return e
}

// EstimateMemorySlots is EstimateMemoryRank for a cache of slots token rows
// per layer (a paged run's pages × page size: KVPlan.Slots) whose block
// table holds maxPages pages per sequence (0: no table, the contiguous
// layout's uniform runs): the views' buffers counted with the activations.
func EstimateMemorySlots(c Config, l TPLayout, batch, tokens int, slots int64, maxPages int) MemoryEstimate {
	h, D := int64(c.HiddenSize), int64(c.HeadDim)
	T, B := int64(tokens), int64(batch)
	perToken := satAdd(4*h, int64(l.QKVDim(c.HeadDim)), satMul(2, int64(l.Heads), D), satMul(3, int64(l.Inter)))
	i32 := satAdd(1, T, B)
	if l.Size > 1 {
		i32 = satAdd(i32, satMul(2, B)) // the argmax keys
	}
	est := MemoryEstimate{
		WeightBytes:     satAdd(satMul(2, c.rankParamCount(l)), satMul(4, D/2)),
		KVCacheBytes:    satMul(2, 2, int64(c.NumHiddenLayers), slots, int64(l.KVHeads), D),
		ActivationBytes: satAdd(satMul(2, satAdd(satMul(T, perToken), satMul(B, satAdd(3*h, int64(l.Vocab))))), satMul(4, i32)),
	}
	if maxPages > 0 {
		// The block table, each view's lengths and query starts, the
		// prefill's and decode's positions (i32) and slots (i64).
		views := satAdd(satMul(B, int64(maxPages)), satMul(2, satAdd(B, B, 1)), T, B)
		est.ActivationBytes = satAdd(est.ActivationBytes, satMul(4, views), satMul(8, satAdd(T, B)))
	}
	if c.Quantization != nil {
		fp8, scales, largest := c.fp8Params(l)
		// An FP8 parameter is 1 byte (2 in bf16); quantizing at load also
		// holds the largest matrix in bf16 for a moment.
		est.WeightBytes = satAdd(est.WeightBytes-fp8, satMul(4, scales))
		if !c.Quantization.Serialized() {
			est.WeightBytes = satAdd(est.WeightBytes, satMul(2, largest))
		}
		widest := max(h, int64(l.Heads)*D, int64(l.Inter))
		est.ActivationBytes = satAdd(est.ActivationBytes, satMul(T, widest), satMul(4, max(T, 1)))
	}
	return est
}

// fp8Params counts a quantized model's FP8 parameters on a rank of layout
// l (the projections its ignore list does not keep in bf16), their scales
// and the largest FP8 matrix's parameters. Every factor is bounded by
// Validate, so these products do not overflow.
func (c Config) fp8Params(l TPLayout) (params, scales, largest int64) {
	h, D := int64(c.HiddenSize), int64(c.HeadDim)
	q := c.Quantization
	for i := 0; i < c.NumHiddenLayers; i++ {
		pre := fmt.Sprintf("model.layers.%d.", i)
		for _, m := range []struct {
			module     string
			rows, cols int64
		}{
			{"self_attn.q_proj", int64(l.QKVDim(c.HeadDim)), h},
			{"self_attn.o_proj", h, int64(l.Heads) * D},
			{"mlp.gate_proj", 2 * int64(l.Inter), h},
			{"mlp.down_proj", h, int64(l.Inter)},
		} {
			if q.Ignored(pre + m.module) {
				continue
			}
			params += m.rows * m.cols
			largest = max(largest, m.rows*m.cols)
			scales += 2 // a weight scale and an input scale
			if q.WeightScales == ScalesChannel {
				scales += m.rows
			}
		}
	}
	return params, scales, largest
}

// hostMemoryHeadroomBytes is kept free of a cpu run's estimate: the Go
// runtime, the garbage collector's slack and the rest of the machine.
const hostMemoryHeadroomBytes = 1 << 30

// HostMemory reads MemAvailable and MemTotal from meminfo (a
// /proc/meminfo-format text), in bytes.
func HostMemory(meminfo []byte) (availableBytes, totalBytes uint64, err error) {
	fields := map[string]uint64{}
	for _, line := range strings.Split(string(meminfo), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		parts := strings.Fields(rest)
		if len(parts) == 2 && parts[1] == "kB" {
			if kb, err := strconv.ParseUint(parts[0], 10, 64); err == nil {
				fields[name] = kb * 1024
			}
		}
	}
	available, okAvailable := fields["MemAvailable"]
	total, okTotal := fields["MemTotal"]
	if !okAvailable || !okTotal {
		return 0, 0, errors.New("no MemAvailable or MemTotal in kB")
	}
	return available, total, nil
}

// CheckFits is a backend's memory check: est plus headroomBytes against
// freeBytes of totalBytes on device (named in the error, with every part of
// the estimate and what to change).
func CheckFits(est MemoryEstimate, freeBytes, totalBytes uint64, headroomBytes int64, device string) error {
	need := satAdd(est.Total(), headroomBytes)
	if need < math.MaxInt64 && uint64(need) <= freeBytes {
		return nil
	}
	gb := func(b int64) float64 { return float64(b) / 1e9 }
	if need == math.MaxInt64 {
		return fmt.Errorf("the run's memory estimate overflows 2^63 bytes (weights %.3g GB + KV cache %.3g GB + activations %.3g GB) "+
			"and cannot fit %s: use a smaller batch size, shorter lengths or a smaller model",
			gb(est.WeightBytes), gb(est.KVCacheBytes), gb(est.ActivationBytes), device)
	}
	return fmt.Errorf("the run needs %.2f GB on %s (weights %.2f GB + KV cache %.2f GB + activations %.2f GB + %.2f GB headroom) but only %.2f GB of %.2f GB are free: use a smaller batch size, shorter lengths or a smaller model",
		gb(need), device, gb(est.WeightBytes), gb(est.KVCacheBytes), gb(est.ActivationBytes), gb(headroomBytes),
		float64(freeBytes)/1e9, float64(totalBytes)/1e9)
}
