package runner

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Quantization describes how a model's linear layers are quantized; a
// Config without one (nil) is bf16 throughout. Only FP8 E4M3 weights with
// per-tensor or per-channel scales and FP8 activations are run; everything
// else a checkpoint may declare is refused by the parsers below, naming the
// field.
type Quantization struct {
	// Method is "fp8", the only one.
	Method string `json:"method"`
	// Format is where the scheme came from: FormatAtLoad (--quantization
	// fp8: bf16 or dummy weights quantized while loading), FormatFP8
	// (AutoFP8 / vLLM quant_method "fp8"), FormatCompressedTensors or
	// FormatModelOpt.
	Format string `json:"format"`
	// WeightScales is ScalesTensor (one scale per matrix) or ScalesChannel
	// (one per output row).
	WeightScales string `json:"weight_scales"`
	// Activations is ActStatic (per tensor, the checkpoint's input_scale),
	// ActDynamicTensor or ActDynamicToken.
	Activations string `json:"activations"`
	// Ignore are the module patterns kept in bf16 (lm_head always is).
	Ignore []string `json:"ignore,omitempty"`
	// IgnoreSyntax says how Ignore matches a module name: IgnoreExact,
	// IgnoreRegexp (compressed-tensors' "re:" entries, exact otherwise) or
	// IgnoreWildcard (ModelOpt's fnmatch patterns).
	IgnoreSyntax string `json:"ignore_syntax,omitempty"`
	// KVCache is a KV-cache scheme the checkpoint declares; its k/v scales
	// are not read and the cache stays bf16.
	KVCache string `json:"kv_cache_ignored,omitempty"`
}

// The values of Quantization's fields.
const (
	MethodFP8 = "fp8"

	FormatAtLoad            = "quantized-at-load"
	FormatFP8               = "fp8"
	FormatCompressedTensors = "compressed-tensors"
	FormatModelOpt          = "modelopt"

	ScalesTensor  = "tensor"
	ScalesChannel = "channel"

	ActStatic        = "static-tensor"
	ActDynamicTensor = "dynamic-tensor"
	ActDynamicToken  = "dynamic-token"

	IgnoreExact    = "exact"
	IgnoreRegexp   = "re"
	IgnoreWildcard = "wildcard"
)

// QuantizeAtLoad is --quantization fp8 on bf16 or dummy weights: every
// projection quantized while loading with a per-tensor scale (of the fused
// matrix, as vLLM's Fp8LinearMethod does), activations quantized
// dynamically per tensor (vLLM's default scheme for fp8).
func QuantizeAtLoad() *Quantization {
	return &Quantization{Method: MethodFP8, Format: FormatAtLoad, WeightScales: ScalesTensor, Activations: ActDynamicTensor}
}

// String describes the scheme in one line for outputs.
func (q *Quantization) String() string {
	if q == nil {
		return "none (bf16)"
	}
	act := map[string]string{ActStatic: "static per tensor", ActDynamicTensor: "dynamic per tensor", ActDynamicToken: "dynamic per token"}[q.Activations]
	return fmt.Sprintf("%s (%s): E4M3 weights scaled per %s, activations %s", q.Method, q.Format, q.WeightScales, act)
}

// Serialized reports whether the checkpoint holds FP8 weights (false: they
// are quantized while loading).
func (q *Quantization) Serialized() bool { return q != nil && q.Format != FormatAtLoad }

// Ignored reports whether module (an HF module name, e.g.
// "model.layers.0.mlp.down_proj") stays in bf16.
func (q *Quantization) Ignored(module string) bool {
	if q == nil {
		return true
	}
	for _, p := range q.Ignore {
		switch {
		case q.IgnoreSyntax == IgnoreRegexp && strings.HasPrefix(p, "re:"):
			// Python's re.match: anchored at the start only. Patterns were
			// compiled once when parsed, so this cannot fail.
			if re, err := regexp.Compile(`^(?:` + p[3:] + `)`); err == nil && re.MatchString(module) {
				return true
			}
		case q.IgnoreSyntax == IgnoreWildcard:
			if ok, _ := path.Match(p, module); ok || p == module {
				return true
			}
		case p == module:
			return true
		}
	}
	return false
}

// validateIgnore checks every pattern can be matched.
func (q *Quantization) validateIgnore(field string) error {
	for _, p := range q.Ignore {
		switch {
		case q.IgnoreSyntax == IgnoreRegexp && strings.HasPrefix(p, "re:"):
			if _, err := regexp.Compile(p[3:]); err != nil {
				return fmt.Errorf("%s: %q: %v", field, p, err)
			}
		case q.IgnoreSyntax == IgnoreWildcard:
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("%s: %q: %v", field, p, err)
			}
		}
	}
	return nil
}

// quantFields decodes one JSON object member by member, so that every error
// names its field (prefix + key).
type quantFields struct {
	where  string // "config /m/config.json field quantization_config"
	prefix string
	raw    map[string]json.RawMessage
}

func newQuantFields(where, prefix string, data json.RawMessage) (quantFields, error) {
	f := quantFields{where: where, prefix: prefix}
	if err := json.Unmarshal(data, &f.raw); err != nil || f.raw == nil {
		return f, fmt.Errorf("%s%s: not a JSON object", where, strings.TrimSuffix(prefix, "."))
	}
	return f, nil
}

func (f quantFields) errorf(key, format string, args ...any) error {
	return fmt.Errorf("%s%s%s: %s", f.where, f.prefix, key, fmt.Sprintf(format, args...))
}

// present reports whether key is there and not null.
func (f quantFields) present(key string) bool {
	v, ok := f.raw[key]
	return ok && strings.TrimSpace(string(v)) != "null"
}

func (f quantFields) get(key string, dst any) (bool, error) {
	if !f.present(key) {
		return false, nil
	}
	if err := json.Unmarshal(f.raw[key], dst); err != nil {
		return true, f.errorf(key, "%v", err)
	}
	return true, nil
}

func (f quantFields) str(key string, required bool) (string, error) {
	var s string
	ok, err := f.get(key, &s)
	if err == nil && !ok && required {
		err = f.errorf(key, "missing")
	}
	return s, err
}

func (f quantFields) nested(key string) (quantFields, bool, error) {
	if !f.present(key) {
		return quantFields{}, false, nil
	}
	g, err := newQuantFields(f.where, f.prefix+key+".", f.raw[key])
	return g, true, err
}

// parseQuantizationConfig reads config.json's quantization_config (raw)
// found in the file at where.
func parseQuantizationConfig(where string, raw json.RawMessage) (*Quantization, error) {
	f, err := newQuantFields(where+" field ", "quantization_config.", raw)
	if err != nil {
		return nil, err
	}
	method, err := f.str("quant_method", true)
	if err != nil {
		return nil, err
	}
	switch method {
	case "fp8":
		return parseFP8Config(f)
	case "compressed-tensors":
		return parseCompressedTensors(f)
	case "modelopt":
		return parseModelOptAlgo(f, "quant_algo", "ignore")
	}
	return nil, f.errorf("quant_method", "%q is not supported (fp8, compressed-tensors with FP8 float-quantized weights, or modelopt FP8)", method)
}

// parseFP8Config is AutoFP8's and vLLM's quant_method "fp8": E4M3 weights
// with a float32 scale per tensor, input_scale per tensor when
// activation_scheme is static.
func parseFP8Config(f quantFields) (*Quantization, error) {
	q := &Quantization{Method: MethodFP8, Format: FormatFP8, WeightScales: ScalesTensor, IgnoreSyntax: IgnoreExact}
	scheme, err := f.str("activation_scheme", true)
	if err != nil {
		return nil, err
	}
	switch scheme {
	case "static":
		q.Activations = ActStatic
	case "dynamic":
		q.Activations = ActDynamicTensor
	default:
		return nil, f.errorf("activation_scheme", "%q is not static or dynamic", scheme)
	}
	if f.present("weight_block_size") {
		return nil, f.errorf("weight_block_size", "block scales are not supported (per-tensor or per-channel only)")
	}
	if fmtName, err := f.str("fmt", false); err != nil {
		return nil, err
	} else if fmtName != "" && fmtName != "e4m3" {
		return nil, f.errorf("fmt", "%q: only e4m3 weights are supported", fmtName)
	}
	if _, err := f.get("ignored_layers", &q.Ignore); err != nil {
		return nil, err
	}
	return q, nil
}

// parseCompressedTensors is llm-compressor's compressed-tensors format
// "float-quantized" with one config group over every Linear: FP8 weights
// (strategy tensor or channel, symmetric, static), FP8 inputs (strategy
// tensor and static, or token and dynamic).
func parseCompressedTensors(f quantFields) (*Quantization, error) {
	q := &Quantization{Method: MethodFP8, Format: FormatCompressedTensors, IgnoreSyntax: IgnoreRegexp}
	format, err := f.str("format", true)
	if err != nil {
		return nil, err
	}
	if format != "float-quantized" {
		return nil, f.errorf("format", "%q is not supported (float-quantized FP8 only: no INT4/INT8 packings, no sparsity)", format)
	}
	var groups map[string]json.RawMessage
	if _, err := f.get("config_groups", &groups); err != nil {
		return nil, err
	}
	if len(groups) != 1 {
		return nil, f.errorf("config_groups", "%d groups: one FP8 scheme for every Linear is supported", len(groups))
	}
	for name, raw := range groups {
		g, err := newQuantFields(f.where, f.prefix+"config_groups."+name+".", raw)
		if err != nil {
			return nil, err
		}
		if err := parseCTGroup(g, q); err != nil {
			return nil, err
		}
	}
	if _, err := f.get("ignore", &q.Ignore); err != nil {
		return nil, err
	}
	if f.present("kv_cache_scheme") {
		q.KVCache = "kv_cache_scheme"
	}
	return q, q.validateIgnore(f.where + f.prefix + "ignore")
}

// parseCTGroup reads one config group's targets, weights and input_activations.
func parseCTGroup(g quantFields, q *Quantization) error {
	var targets []string
	if _, err := g.get("targets", &targets); err != nil {
		return err
	}
	if len(targets) != 1 || targets[0] != "Linear" {
		return g.errorf("targets", "%q: one group targeting every Linear is supported", targets)
	}
	w, ok, err := g.nested("weights")
	if err != nil {
		return err
	}
	if !ok {
		return g.errorf("weights", "missing")
	}
	if q.WeightScales, err = ctArgs(w, false); err != nil {
		return err
	}
	in, ok, err := g.nested("input_activations")
	if err != nil {
		return err
	}
	if !ok {
		return g.errorf("input_activations", "missing: FP8 weights with bf16 activations (W8A16) are not supported")
	}
	q.Activations, err = ctArgs(in, true)
	return err
}

// ctArgs checks a compressed-tensors QuantizationArgs object: 8-bit float,
// symmetric; weights static per tensor or channel (the scale granularity
// returned), inputs static per tensor or dynamic per token (the activation
// scheme returned).
func ctArgs(a quantFields, input bool) (string, error) {
	var bits int
	if _, err := a.get("num_bits", &bits); err != nil {
		return "", err
	}
	if bits != 8 {
		return "", a.errorf("num_bits", "%d: only 8-bit FP8 is supported", bits)
	}
	typ, err := a.str("type", true)
	if err != nil {
		return "", err
	}
	if typ != "float" {
		return "", a.errorf("type", "%q: only float (FP8 E4M3) is supported", typ)
	}
	symmetric := true
	if _, err := a.get("symmetric", &symmetric); err != nil {
		return "", err
	}
	if !symmetric {
		return "", a.errorf("symmetric", "false: asymmetric (zero-point) quantization is not supported")
	}
	var dynamic bool
	if _, err := a.get("dynamic", &dynamic); err != nil {
		return "", err
	}
	strategy, err := a.str("strategy", true)
	if err != nil {
		return "", err
	}
	switch {
	case !input && !dynamic && (strategy == "tensor" || strategy == "channel"):
		return strategy, nil
	case !input && dynamic:
		return "", a.errorf("dynamic", "true: weights must have static scales")
	case input && strategy == "tensor" && !dynamic:
		return ActStatic, nil
	case input && strategy == "tensor" && dynamic:
		return ActDynamicTensor, nil
	case input && strategy == "token" && dynamic:
		return ActDynamicToken, nil
	case input && strategy == "token":
		return "", a.errorf("dynamic", "false: per-token input scales must be dynamic")
	}
	return "", a.errorf("strategy", "%q is not supported (weights: tensor or channel; inputs: tensor or token; no block or group scales)", strategy)
}

// ModelOptConfigFile is where NVIDIA ModelOpt exports its scheme, beside config.json.
const ModelOptConfigFile = "hf_quant_config.json"

// parseModelOptFile reads hf_quant_config.json: {"producer": ..., "quantization":
// {"quant_algo": "FP8", "kv_cache_quant_algo": ..., "exclude_modules": [...]}}.
func parseModelOptFile(where string, data []byte) (*Quantization, error) {
	f, err := newQuantFields(where+" field ", "", data)
	if err != nil {
		return nil, err
	}
	inner, ok, err := f.nested("quantization")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, f.errorf("quantization", "missing")
	}
	return parseModelOptAlgo(inner, "quant_algo", "exclude_modules")
}

// parseModelOptAlgo reads ModelOpt's quant_algo ("FP8": E4M3 weights with a
// scale per tensor, static input scales per tensor) and its list of modules
// left in bf16.
func parseModelOptAlgo(f quantFields, algoKey, excludeKey string) (*Quantization, error) {
	algo, err := f.str(algoKey, true)
	if err != nil {
		return nil, err
	}
	if strings.ToUpper(algo) != "FP8" {
		return nil, f.errorf(algoKey, "%q is not supported (FP8 only: no NVFP4, INT4_AWQ, W4A8 or per-block FP8)", algo)
	}
	q := &Quantization{Method: MethodFP8, Format: FormatModelOpt, WeightScales: ScalesTensor, Activations: ActStatic, IgnoreSyntax: IgnoreWildcard}
	if _, err := f.get(excludeKey, &q.Ignore); err != nil {
		return nil, err
	}
	var kv string
	if _, err := f.get("kv_cache_quant_algo", &kv); err != nil {
		return nil, err
	}
	if kv != "" {
		q.KVCache = "kv_cache_quant_algo " + kv
	}
	return q, q.validateIgnore(f.where + f.prefix + excludeKey)
}
