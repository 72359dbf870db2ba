package gpu

import (
	"fmt"

	"stepbench/cuda"
	"stepbench/kernels"
)

// KVPtrs are the device addresses of a step's view of the cache
// (runner.KVView): Pos alone for a uniform contiguous step, the rest for a
// tabled one (kernels.AttnShape.Tabled).
type KVPtrs struct {
	Pos, BlockTable, SeqLens, QueryStart, Positions, SlotMapping cuda.DevPtr
}

// errNoTabledKernels: the block-table kernels (rope_kv_write 3,
// attn_prefill 4, attn_decode 6) are not in this build yet.
var errNoTabledKernels = fmt.Errorf("the paged KV cache's kernels are not built yet")

func (k *Kernels) ropeKVWriteTabled(s *cuda.Stream, q, kCache, vCache, qkv, invFreq cuda.DevPtr, kv KVPtrs, a kernels.AttnShape) error {
	if ran, err := k.libRopeKVWrite(s, q, kCache, vCache, qkv, invFreq, kv, a); ran || err != nil {
		return err
	}
	return fmt.Errorf("rope_kv_write: %w", errNoTabledKernels)
}

func (k *Kernels) attentionTabled(s *cuda.Stream, out, q, kCache, vCache cuda.DevPtr, kv KVPtrs, workspace cuda.DevPtr, workspaceBytes int, a kernels.AttnShape) error {
	if ran, err := k.libAttention(s, out, q, kCache, vCache, kv, a); ran || err != nil {
		return err
	}
	return fmt.Errorf("attention: %w", errNoTabledKernels)
}

// AdvanceKV moves a tabled decode step's view one token on
// (ref.KVAdvance).
func (k *Kernels) AdvanceKV(s *cuda.Stream, kv KVPtrs, a kernels.AttnShape) error {
	return fmt.Errorf("advance_kv: %w", errNoTabledKernels)
}

// GatherLastRagged copies each sequence's last new row (ref.GatherLastRagged);
// in holds inRows rows.
func (k *Kernels) GatherLastRagged(s *cuda.Stream, out, in, queryStart cuda.DevPtr, batch, width, inRows int) error {
	return fmt.Errorf("gather_last: %w", errNoTabledKernels)
}
