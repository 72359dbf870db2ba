package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// oneRank is --tp-size on a command that runs on one GPU: 1 (vLLM's habit
// of always passing --tensor-parallel-size) is accepted, anything else
// refused naming the commands that split a model.
type oneRank struct{ command string }

func (o oneRank) String() string { return "1" }
func (o oneRank) Type() string   { return "int" }
func (o oneRank) Set(s string) error {
	if strings.TrimSpace(s) == "1" {
		return nil
	}
	return listError{fmt.Sprintf("stepbench %s runs on one GPU; run and roofline take --tp-size N", o.command)}
}

// registerOneRank adds --tp-size (and its aliases) taking 1 only.
func registerOneRank(fs *pflag.FlagSet, command string) {
	fs.Var(oneRank{command}, "tp-size", "tensor-parallel size: 1 only (vLLM's --tensor-parallel-size 1 is accepted); "+command+" runs on one GPU")
}
