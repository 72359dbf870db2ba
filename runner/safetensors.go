package runner

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"unsafe"

	"stepbench/internal/input"
	"stepbench/kernels/ref"
)

// Safetensors layout: an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {string: string}}, then the data; offsets count from the
// first byte after the header.

const (
	safetensorsSingleFile = "model.safetensors"
	safetensorsIndexFile  = "model.safetensors.index.json"
	safetensorsMetadata   = "__metadata__"
	// maxSafetensorsHeaderBytes bounds the JSON header, as the reference
	// implementation does, so a corrupt length cannot make us parse gigabytes.
	maxSafetensorsHeaderBytes = 100 << 20
	// maxSafetensorsIndexBytes bounds model.safetensors.index.json (Llama
	// 3.1 405B's is 90 KB).
	maxSafetensorsIndexBytes = 64 << 20
)

// safetensorsDTypeBytes is the element size of every dtype the format
// names (known false for others); only supportedSafetensorsDType ones can be
// converted to bf16.
func safetensorsDTypeBytes(dtype string) (size int, known bool) {
	switch dtype {
	case "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3":
		return 1, true
	case "I16", "U16", "F16", "BF16":
		return 2, true
	case "I32", "U32", "F32":
		return 4, true
	case "I64", "U64", "F64":
		return 8, true
	}
	return 0, false
}

func supportedSafetensorsDType(dtype string) bool {
	return floatDType(dtype) || dtype == "F8_E4M3" || dtype == "F8_E5M2"
}

// floatDType is a dtype BF16 converts: the bf16 tensors' and the scales'.
func floatDType(dtype string) bool { return dtype == "BF16" || dtype == "F16" || dtype == "F32" }

// TensorSpec is one tensor the model needs, by HF name.
type TensorSpec struct {
	Name  string
	Shape []int
}

// ExpectedTensors lists every tensor cfg's architecture needs, with
// HF names and shapes (rows = output features, as nn.Linear stores them).
func ExpectedTensors(cfg Config) []TensorSpec {
	hidden, inter := cfg.HiddenSize, cfg.IntermediateSize
	qDim := cfg.NumAttentionHeads * cfg.HeadDim
	kvDim := cfg.NumKeyValueHeads * cfg.HeadDim
	specs := make([]TensorSpec, 0, 2+cfg.TensorsPerLayer()*cfg.NumHiddenLayers+2)
	specs = append(specs, TensorSpec{"model.embed_tokens.weight", []int{cfg.VocabSize, hidden}})
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		specs = append(specs,
			TensorSpec{p + "input_layernorm.weight", []int{hidden}},
			TensorSpec{p + "self_attn.q_proj.weight", []int{qDim, hidden}},
			TensorSpec{p + "self_attn.k_proj.weight", []int{kvDim, hidden}},
			TensorSpec{p + "self_attn.v_proj.weight", []int{kvDim, hidden}},
			TensorSpec{p + "self_attn.o_proj.weight", []int{hidden, qDim}},
			TensorSpec{p + "post_attention_layernorm.weight", []int{hidden}},
			TensorSpec{p + "mlp.gate_proj.weight", []int{inter, hidden}},
			TensorSpec{p + "mlp.up_proj.weight", []int{inter, hidden}},
			TensorSpec{p + "mlp.down_proj.weight", []int{hidden, inter}},
		)
		if cfg.QKVBias { // Qwen2
			specs = append(specs, TensorSpec{p + "self_attn.q_proj.bias", []int{qDim}},
				TensorSpec{p + "self_attn.k_proj.bias", []int{kvDim}}, TensorSpec{p + "self_attn.v_proj.bias", []int{kvDim}})
		}
		if cfg.QKNorm { // Qwen3
			specs = append(specs, TensorSpec{p + "self_attn.q_norm.weight", []int{cfg.HeadDim}},
				TensorSpec{p + "self_attn.k_norm.weight", []int{cfg.HeadDim}})
		}
	}
	specs = append(specs, TensorSpec{"model.norm.weight", []int{hidden}})
	if !cfg.TieWordEmbeddings {
		specs = append(specs, TensorSpec{"lm_head.weight", []int{cfg.VocabSize, hidden}})
	}
	return specs
}

// safetensorsTensor is one validated header entry.
type safetensorsTensor struct {
	DType      string
	Shape      []int
	Begin, End int64 // byte offsets into the file's data section
}

// safetensorsFile is one validated file, open for reading. Tensors are read
// with pread into memory of our own, never through a mapping: a file that
// shrinks under the loader is then an error naming it, not a SIGBUS.
type safetensorsFile struct {
	path      string
	r         io.ReaderAt // the file (an *os.File, or bytes in tests)
	closer    io.Closer   // nil for bytes
	dataStart int64       // the first byte after the header
	dataLen   int64
	tensors   map[string]safetensorsTensor
	metadata  map[string]string
}

// SafetensorsModel is a model's weights in one or more safetensors files,
// kept open until Close.
type SafetensorsModel struct {
	dir    string
	source string // the file that names the tensors: model.safetensors or the index
	files  []*safetensorsFile
	byName map[string]*safetensorsFile
}

// OpenSafetensors opens dir/model.safetensors or, when that is absent, the
// shards listed by dir/model.safetensors.index.json. Every file is validated
// completely before anything is returned; every error is bad input
// (input.IsBad).
func OpenSafetensors(dir string) (*SafetensorsModel, error) {
	m, err := openSafetensors(dir)
	return m, input.Bad(err)
}

func openSafetensors(dir string) (*SafetensorsModel, error) {
	single := filepath.Join(dir, safetensorsSingleFile)
	if _, err := os.Stat(single); err == nil {
		f, err := openSafetensorsFile(single)
		if err != nil {
			return nil, err
		}
		m := &SafetensorsModel{dir: dir, source: single, files: []*safetensorsFile{f}, byName: map[string]*safetensorsFile{}}
		for name := range f.tensors {
			m.byName[name] = f
		}
		return m, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}

	index := filepath.Join(dir, safetensorsIndexFile)
	weightMap, err := readSafetensorsIndex(index)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open safetensors in %s: neither %s nor %s exists", dir, safetensorsSingleFile, safetensorsIndexFile)
	}
	if err != nil {
		return nil, err
	}
	m := &SafetensorsModel{dir: dir, source: index, byName: map[string]*safetensorsFile{}}
	shards := map[string]*safetensorsFile{}
	for _, shard := range sortedUniqueValues(weightMap) {
		f, err := openSafetensorsFile(filepath.Join(dir, shard))
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("shard named by %s: %w", index, err)
		}
		m.files = append(m.files, f)
		shards[shard] = f
		for name := range f.tensors {
			if other, dup := m.byName[name]; dup {
				m.Close()
				return nil, fmt.Errorf("safetensors %s: tensor %q is also in %s", f.path, name, other.path)
			}
			m.byName[name] = f
		}
	}
	for name, shard := range weightMap {
		if _, ok := shards[shard].tensors[name]; !ok {
			m.Close()
			return nil, fmt.Errorf("index %s: tensor %q: shard %s does not contain it", index, name, shards[shard].path)
		}
	}
	return m, nil
}

// readSafetensorsIndex returns the index's weight_map (tensor name → shard
// file name). A missing index file yields an error wrapping os.ErrNotExist.
func readSafetensorsIndex(path string) (map[string]string, error) {
	data, err := input.ReadFile(path, maxSafetensorsIndexBytes, "a safetensors index")
	if err != nil {
		return nil, fmt.Errorf("read safetensors index: %w", err)
	}
	return parseSafetensorsIndex(path, data)
}

// parseSafetensorsIndex decodes and checks an index's weight_map; it never
// panics, whatever the bytes (see FuzzSafetensorsIndex).
func parseSafetensorsIndex(path string, data []byte) (map[string]string, error) {
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("index %s: field weight_map is missing or empty", path)
	}
	for name, shard := range index.WeightMap {
		// Shards live beside the index; refuse names that would escape it.
		if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
			return nil, fmt.Errorf("index %s: tensor %q: shard name %q is not a file name in the model directory", path, name, shard)
		}
	}
	return index.WeightMap, nil
}

func sortedUniqueValues(m map[string]string) []string {
	var values []string
	for _, v := range m {
		values = append(values, v)
	}
	slices.Sort(values)
	return slices.Compact(values)
}

// openSafetensorsFile opens path (a regular file: a FIFO is refused, not
// waited on) and validates its header.
func openSafetensorsFile(path string) (*safetensorsFile, error) {
	osFile, err := input.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	info, err := osFile.Stat()
	if err != nil {
		osFile.Close()
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	f, err := parseSafetensors(path, osFile, info.Size())
	if err != nil {
		osFile.Close()
		return nil, err
	}
	f.closer = osFile
	return f, nil
}

// parseSafetensors validates the header of a file of size bytes read
// through r. It never panics, whatever the bytes (see
// FuzzSafetensorsHeader), and reads at most the header.
func parseSafetensors(path string, r io.ReaderAt, size int64) (*safetensorsFile, error) {
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the 8-byte header length", path, size)
	}
	var lenBytes [8]byte
	if _, err := r.ReadAt(lenBytes[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: read the header length: %w", path, err)
	}
	headerLen := binary.LittleEndian.Uint64(lenBytes[:])
	if headerLen > uint64(size-8) {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the %d bytes after it (truncated or not safetensors)",
			path, headerLen, size-8)
	}
	if headerLen > maxSafetensorsHeaderBytes {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds the %d-byte limit", path, headerLen, maxSafetensorsHeaderBytes)
	}
	header := make([]byte, headerLen)
	if _, err := r.ReadAt(header, 8); err != nil {
		return nil, fmt.Errorf("safetensors %s: read the %d-byte header: %w", path, headerLen, err)
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(header, &entries); err != nil {
		return nil, fmt.Errorf("safetensors %s: header JSON: %w", path, err)
	}
	f := &safetensorsFile{
		path:      path,
		r:         r,
		dataStart: 8 + int64(headerLen),
		dataLen:   size - 8 - int64(headerLen),
		tensors:   make(map[string]safetensorsTensor, len(entries)),
	}
	for name, raw := range entries {
		if name == safetensorsMetadata {
			if err := json.Unmarshal(raw, &f.metadata); err != nil {
				return nil, fmt.Errorf("safetensors %s: %s must map strings to strings: %w", path, safetensorsMetadata, err)
			}
			continue
		}
		t, err := parseSafetensorsEntry(raw, f.dataLen)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", path, name, err)
		}
		f.tensors[name] = t
	}
	if err := checkNoOverlap(f); err != nil {
		return nil, err
	}
	return f, nil
}

// parseSafetensorsEntry validates one tensor's header entry against a data
// section of dataLen bytes.
func parseSafetensorsEntry(raw json.RawMessage, dataLen int64) (safetensorsTensor, error) {
	var entry struct {
		DType       *string  `json:"dtype"`
		Shape       []int64  `json:"shape"`
		DataOffsets []uint64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw, &entry); err != nil {
		return safetensorsTensor{}, fmt.Errorf("header entry: %w", err)
	}
	if entry.DType == nil {
		return safetensorsTensor{}, errors.New("dtype is missing")
	}
	dtype := *entry.DType
	elemBytes, known := safetensorsDTypeBytes(dtype)
	switch {
	case !known:
		return safetensorsTensor{}, fmt.Errorf("unknown dtype %q", dtype)
	case !supportedSafetensorsDType(dtype):
		return safetensorsTensor{}, fmt.Errorf("unsupported dtype %s (BF16, F16, F32 and, in FP8 models, F8_E4M3 are supported)", dtype)
	}
	if entry.Shape == nil {
		return safetensorsTensor{}, errors.New("shape is missing")
	}
	if len(entry.DataOffsets) != 2 {
		return safetensorsTensor{}, fmt.Errorf("data_offsets must be [begin, end], got %d numbers", len(entry.DataOffsets))
	}
	begin, end := entry.DataOffsets[0], entry.DataOffsets[1]
	if begin > end || end > uint64(dataLen) {
		return safetensorsTensor{}, fmt.Errorf("data_offsets [%d, %d] out of bounds of the %d data bytes (truncated file?)", begin, end, dataLen)
	}
	// end ≤ dataLen bounds the byte count, so a product above it is a
	// mismatch whether or not it would overflow; stop multiplying there.
	shape := make([]int, len(entry.Shape))
	bytesWanted := uint64(elemBytes)
	for i, d := range entry.Shape {
		if d < 0 {
			return safetensorsTensor{}, fmt.Errorf("shape %v has a negative dimension", entry.Shape)
		}
		shape[i] = int(d)
		if bytesWanted != 0 && uint64(d) > uint64(dataLen)/bytesWanted {
			return safetensorsTensor{}, fmt.Errorf("shape %v × %d bytes (%s) exceeds the %d data bytes", entry.Shape, elemBytes, dtype, dataLen)
		}
		bytesWanted *= uint64(d)
	}
	if bytesWanted != end-begin {
		return safetensorsTensor{}, fmt.Errorf("shape %v × %d bytes (%s) = %d bytes, but data_offsets [%d, %d] hold %d",
			entry.Shape, elemBytes, dtype, bytesWanted, begin, end, end-begin)
	}
	return safetensorsTensor{DType: dtype, Shape: shape, Begin: int64(begin), End: int64(end)}, nil
}

// checkNoOverlap refuses two tensors sharing a byte of data.
func checkNoOverlap(f *safetensorsFile) error {
	type span struct {
		name       string
		begin, end int64
	}
	spans := make([]span, 0, len(f.tensors))
	for name, t := range f.tensors {
		if t.End > t.Begin { // empty tensors occupy no bytes
			spans = append(spans, span{name, t.Begin, t.End})
		}
	}
	sort.Slice(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].name < spans[j].name
	})
	for i := 1; i < len(spans); i++ {
		prev, cur := spans[i-1], spans[i]
		if cur.begin < prev.end {
			return fmt.Errorf("safetensors %s: tensor %q bytes [%d, %d) overlap tensor %q bytes [%d, %d)",
				f.path, cur.name, cur.begin, cur.end, prev.name, prev.begin, prev.end)
		}
	}
	return nil
}

// Names lists the tensors of every file, sorted.
func (m *SafetensorsModel) Names() []string {
	names := make([]string, 0, len(m.byName))
	for name := range m.byName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Metadata returns the __metadata__ of every file merged (later shards win).
func (m *SafetensorsModel) Metadata() map[string]string {
	merged := map[string]string{}
	for _, f := range m.files {
		for k, v := range f.metadata {
			merged[k] = v
		}
	}
	return merged
}

// Check verifies every tensor of ExpectedTensors(cfg) is present with exactly
// the expected shape. Extra tensors (e.g. rotary inv_freq) are ignored. Its
// errors are bad input (input.IsBad).
func (m *SafetensorsModel) Check(cfg Config) error {
	return input.Bad(m.check(cfg))
}

func (m *SafetensorsModel) check(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("check weights in %s: %w", m.dir, err)
	}
	if err := m.checkShapes(cfg); err != nil {
		return err
	}
	return m.checkQuantized(cfg)
}

// checkShapes checks every expected tensor is there with its shape.
func (m *SafetensorsModel) checkShapes(cfg Config) error {
	const maxReported = 8 // a wrong config mismatches hundreds of tensors
	var errs []error
	mismatches := 0
	for _, spec := range ExpectedTensors(cfg) {
		var err error
		f, ok := m.byName[spec.Name]
		if !ok {
			err = fmt.Errorf("tensor %q: missing from %s (want shape %v)", spec.Name, m.source, spec.Shape)
		} else if got := f.tensors[spec.Name].Shape; !slices.Equal(got, spec.Shape) {
			err = fmt.Errorf("tensor %q in %s: shape %v, want %v for model %s", spec.Name, f.path, got, spec.Shape, cfg.Name)
		}
		if err != nil {
			mismatches++
			if len(errs) < maxReported {
				errs = append(errs, err)
			}
		}
	}
	if mismatches > maxReported {
		errs = append(errs, fmt.Errorf("and %d more mismatched tensors", mismatches-maxReported))
	}
	return errors.Join(errs...)
}

// BF16 returns the tensor as bf16 bit patterns, in memory of its own: F32
// is rounded to nearest even (ref.F32ToBF16), F16 is widened exactly then
// rounded. A file that no longer holds the tensor (truncated after it was
// opened) is an error naming the file.
func (m *SafetensorsModel) BF16(name string) ([]uint16, error) {
	f, ok := m.byName[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q: not in %s", name, m.source)
	}
	t := f.tensors[name]
	switch t.DType {
	case "BF16":
		out := make([]uint16, (t.End-t.Begin)/2)
		if len(out) == 0 {
			return out, nil
		}
		// Read the little-endian bytes straight into out (swapped below on a
		// big-endian host): one copy, from the page cache.
		if err := f.read(name, t, unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 2*len(out))); err != nil {
			return nil, err
		}
		if !hostIsLittleEndian() {
			for i, v := range out {
				out[i] = v<<8 | v>>8
			}
		}
		return out, nil
	case "F16":
		raw := make([]byte, t.End-t.Begin)
		if err := f.read(name, t, raw); err != nil {
			return nil, err
		}
		out := make([]uint16, len(raw)/2)
		for i := range out {
			out[i] = ref.F32ToBF16(f16ToF32(binary.LittleEndian.Uint16(raw[2*i:])))
		}
		return out, nil
	case "F32":
		raw := make([]byte, t.End-t.Begin)
		if err := f.read(name, t, raw); err != nil {
			return nil, err
		}
		out := make([]uint16, len(raw)/4)
		for i := range out {
			out[i] = ref.F32ToBF16(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		return out, nil
	}
	// Check refuses FP8 tensors where bf16 is read.
	return nil, fmt.Errorf("safetensors %s: tensor %q: dtype %s is not a bf16, f16 or f32 tensor", f.path, name, t.DType)
}

// E4M3 returns an F8_E4M3 tensor's bytes, in memory of their own.
func (m *SafetensorsModel) E4M3(name string) ([]uint8, error) {
	f, ok := m.byName[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q: not in %s", name, m.source)
	}
	t := f.tensors[name]
	if t.DType != "F8_E4M3" {
		return nil, fmt.Errorf("safetensors %s: tensor %q: dtype %s, want F8_E4M3", f.path, name, t.DType)
	}
	out := make([]uint8, t.End-t.Begin)
	return out, f.read(name, t, out)
}

// Scales returns a float tensor (F32, BF16 or F16) as float32, flattened:
// the quantization scales.
func (m *SafetensorsModel) Scales(name string) ([]float32, error) {
	f, ok := m.byName[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q: not in %s", name, m.source)
	}
	t := f.tensors[name]
	raw := make([]byte, t.End-t.Begin)
	if err := f.read(name, t, raw); err != nil {
		return nil, err
	}
	switch t.DType {
	case "F32":
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out, nil
	case "BF16", "F16":
		out := make([]float32, len(raw)/2)
		for i := range out {
			b := binary.LittleEndian.Uint16(raw[2*i:])
			if t.DType == "BF16" {
				out[i] = ref.BF16ToF32(b)
			} else {
				out[i] = f16ToF32(b)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("safetensors %s: tensor %q: dtype %s is not a float scale (F32, BF16 or F16)", f.path, name, t.DType)
}

// read reads tensor t's bytes into dst.
func (f *safetensorsFile) read(name string, t safetensorsTensor, dst []byte) error {
	if f.r == nil {
		return fmt.Errorf("safetensors %s: closed", f.path)
	}
	if len(dst) == 0 {
		return nil
	}
	n, err := f.r.ReadAt(dst, f.dataStart+t.Begin)
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("safetensors %s: tensor %q: the file ends %d bytes into the tensor's %d (it was truncated after it was opened?)",
			f.path, name, n, len(dst))
	}
	return fmt.Errorf("safetensors %s: tensor %q: %w", f.path, name, err)
}

// hostIsLittleEndian decides whether file bytes can be read in place as uint16.
func hostIsLittleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

// f16ToF32 widens an IEEE-754 binary16 bit pattern to float32 exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN; keep the payload's top bits
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal: rebias 15 → 127
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant × 2^-24, exact in float32.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// Close closes every file.
func (m *SafetensorsModel) Close() error {
	var errs []error
	for _, f := range m.files {
		if f.closer != nil {
			if err := f.closer.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", f.path, err))
			}
		}
		f.r, f.closer = nil, nil
	}
	m.files = nil
	m.byName = map[string]*safetensorsFile{}
	return errors.Join(errs...)
}
