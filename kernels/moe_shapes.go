package kernels

// MoEShape is a mixture-of-experts layer's shape: hidden size, each
// expert's intermediate size, the experts and how many each token routes
// to, and whether the router renormalizes the chosen weights.
type MoEShape struct {
	Name                    string
	Hidden, Inter           int
	Experts, TopK           int
	Renormalize             bool
	DecodeLongOnly          bool // its decode check is too slow on the emulated device for every verify (verify --long)
	ExpertsAllocated        int  // experts whose weights the layer checks hold (the router sees all)
	MaxDecodeTokens         int  // tokens of the largest decode check
	AlignBlockSizes         []int
	AlignTokens, TopKTokens []int
}

// MoEShapes are the MoE layers verify checks, from the published
// config.json files: Qwen3-30B-A3B (hidden_size 2048,
// moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8,
// norm_topk_prob true) and Mixtral-8x7B (4096, intermediate_size 14336,
// num_local_experts 8, num_experts_per_tok 2, always renormalized).
func MoEShapes() []MoEShape {
	return []MoEShape{
		{Name: "qwen3-30b-a3b", Hidden: 2048, Inter: 768, Experts: 128, TopK: 8, Renormalize: true,
			ExpertsAllocated: 12, MaxDecodeTokens: 3, AlignBlockSizes: []int{16, 64}, AlignTokens: []int{1, 37, 512}, TopKTokens: []int{1, 37}},
		{Name: "mixtral-8x7b", Hidden: 4096, Inter: 14336, Experts: 8, TopK: 2, Renormalize: true, DecodeLongOnly: true,
			ExpertsAllocated: 3, MaxDecodeTokens: 1, AlignBlockSizes: []int{64}, AlignTokens: []int{1, 300}, TopKTokens: []int{1, 37}},
	}
}

// TinyMoEShapes are MoE layers small enough for every test on the
// emulated device: renormalized and not, groups that span several blocks,
// decode over every expert.
func TinyMoEShapes() []MoEShape {
	return []MoEShape{
		{Name: "moe-tiny", Hidden: 64, Inter: 48, Experts: 16, TopK: 4, Renormalize: true,
			ExpertsAllocated: 16, MaxDecodeTokens: 3, AlignBlockSizes: []int{4, 16}, AlignTokens: []int{1, 37}, TopKTokens: []int{1, 5}},
		{Name: "moe-tiny-softmax", Hidden: 32, Inter: 16, Experts: 8, TopK: 2,
			ExpertsAllocated: 8, MaxDecodeTokens: 2, AlignBlockSizes: []int{4}, AlignTokens: []int{9}, TopKTokens: []int{3}},
	}
}
