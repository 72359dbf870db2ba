package bench

// IterationTokens is the tokens one_batch's overall throughput counts for
// an iteration of the shape: (input_len + output_len) × batch for a
// uniform batch; a ragged one's prompt tokens (PromptTokens: the sum of its
// lengths, or one per sequence over a synthetic context) and the batch ×
// output_len it generates.
func (s Shape) IterationTokens() int { return s.PromptTokens() + s.Batch*s.OutputLen }
