package runner

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"stepbench/kernels"
	"stepbench/kernels/ref"
)

// The calibration's divisors, vLLM's K_SCALE_CONSTANT and V_SCALE_CONSTANT
// (not E4M3's 448: they leave headroom for values past the calibration's).
const (
	KScaleConstant = 200
	VScaleConstant = 100
)

// ScalesFromAmax is the per-tensor scales of amaxes per layer: amax over
// KScaleConstant for K, over VScaleConstant for V, 1.0 for a layer whose
// amax is zero (a scale of zero would make every byte NaN), repeated for
// kvHeads heads.
func ScalesFromAmax(kAmax, vAmax []float32, kvHeads int) KVScales {
	s := UnitKVScales(len(kAmax), kvHeads)
	for l := range kAmax {
		for g := range kvHeads {
			if kAmax[l] > 0 {
				s.K[l][g] = kAmax[l] / KScaleConstant
			}
			if vAmax[l] > 0 {
				s.V[l][g] = vAmax[l] / VScaleConstant
			}
		}
	}
	return s
}

// BeginCalibration starts the run whose prefill measures an FP8 cache's
// scales (CalibrationAmax): seqs and prompts as BeginSeqs takes them, on
// a bf16 cache of the same layout. Untimed: the caller times nothing until
// CalibrationAmax has returned.
func (e *Engine) BeginCalibration(seqs []SeqSpec, prompts []int32) error {
	if !e.kv.DType.FP8() {
		return fmt.Errorf("calibrate kv scales: the cache is %s, not FP8", e.kv.DType)
	}
	e.calibrating = e.kv
	e.kv.DType = kernels.CacheBF16
	if err := e.BeginSeqs(seqs, 1, prompts); err != nil {
		e.kv = e.calibrating
		return fmt.Errorf("calibrate kv scales: %w", err)
	}
	return nil
}

// CalibrationAmax is, after BeginCalibration and Prefill, the largest |K|
// and |V| per layer over every position the prefill's sequences hold (this
// engine's KV heads), and puts the FP8 cache back.
func (e *Engine) CalibrationAmax() (kAmax, vAmax []float32, err error) {
	if e.calibrating.DType == kernels.CacheBF16 || e.kv.DType != kernels.CacheBF16 {
		return nil, nil, errors.New("calibrate kv scales: no calibration begun")
	}
	defer func() { e.kv, e.calibrating = e.calibrating, KVOptions{} }()
	if !e.prefilled {
		return nil, nil, errors.New("calibrate kv scales: the prefill has not run")
	}
	if err := e.be.Sync(); err != nil {
		return nil, nil, fmt.Errorf("calibrate kv scales: %w", err)
	}
	width := e.tp.KVHeads * e.cfg.HeadDim
	var slots []int64
	for b, s := range e.seqs {
		for j := range s.Context + s.Prompt {
			if e.tabled {
				slots = append(slots, e.plan.Slot(b, j))
			} else {
				slots = append(slots, int64(b*e.maxSeq+j))
			}
		}
	}
	cache := make([]uint16, e.plan.Slots()*width)
	if !e.tabled {
		cache = make([]uint16, e.batch*e.maxSeq*width)
	}
	kAmax, vAmax = make([]float32, len(e.kCache)), make([]float32, len(e.kCache))
	for l := range e.kCache {
		for i, c := range []Buffer{e.kCache[l], e.vCache[l]} {
			if err := e.be.DownloadBF16(c, cache); err != nil {
				return nil, nil, fmt.Errorf("calibrate kv scales: layer %d: %w", l, err)
			}
			var amax float32
			for _, slot := range slots {
				for _, x := range cache[int(slot)*width : (int(slot)+1)*width] {
					amax = max(amax, float32(math.Abs(float64(ref.BF16ToF32(x)))))
				}
			}
			[]([]float32){kAmax, vAmax}[i][l] = amax
		}
	}
	return kAmax, vAmax, nil
}

// CalibrateKVScales measures an FP8 cache's per-tensor scales on the
// prefill of seqs with prompts (vLLM's calculate_kv_scales: the first
// forward's amax over KScaleConstant and VScaleConstant) and sets them.
func (e *Engine) CalibrateKVScales(seqs []SeqSpec, prompts []int32) (KVScales, error) {
	if err := e.BeginCalibration(seqs, prompts); err != nil {
		return KVScales{}, err
	}
	if err := e.Prefill(); err != nil {
		e.kv, e.calibrating = e.calibrating, KVOptions{}
		return KVScales{}, fmt.Errorf("calibrate kv scales: %w", err)
	}
	k, v, err := e.CalibrationAmax()
	if err != nil {
		return KVScales{}, err
	}
	s := ScalesFromAmax(k, v, e.cfg.NumKeyValueHeads)
	return s, e.SetKVScales(s)
}

// CalibrateKVScales is Engine.CalibrateKVScales on every rank: each
// measures its KV heads, the scales are the largest over the ranks (per
// tensor, as one GPU's), set on every rank.
func (g *Group) CalibrateKVScales(seqs []SeqSpec, prompts []int32) (KVScales, error) {
	if err := g.Do(func(_ int, e *Engine) error { return e.BeginCalibration(seqs, prompts) }); err != nil {
		return KVScales{}, err
	}
	if err := g.Prefill(); err != nil {
		return KVScales{}, fmt.Errorf("calibrate kv scales: %w", err)
	}
	var mu sync.Mutex
	var kAmax, vAmax []float32
	err := g.Do(func(_ int, e *Engine) error {
		k, v, err := e.CalibrationAmax()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if kAmax == nil {
			kAmax, vAmax = make([]float32, len(k)), make([]float32, len(v))
		}
		for l := range k {
			kAmax[l], vAmax[l] = max(kAmax[l], k[l]), max(vAmax[l], v[l])
		}
		return nil
	})
	if err != nil {
		return KVScales{}, err
	}
	s := ScalesFromAmax(kAmax, vAmax, g.cfg.NumKeyValueHeads)
	return s, g.SetKVScales(s)
}

// SetKVScales sets every rank's FP8 cache scales (Engine.SetKVScales).
func (g *Group) SetKVScales(s KVScales) error {
	return g.Do(func(_ int, e *Engine) error { return e.SetKVScales(s) })
}
