package main

import (
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

// numberList is a value that may continue a list flag: "2" or "2,4".
var numberList = regexp.MustCompile(`^[0-9]+(,[0-9]+)*$`)

// joinListValues rewrites "--batch-size 1 2 4" as "--batch-size=1,2,4"
// for every list flag of fs, so that one_batch's habit (argparse's
// nargs="+") works beside pflag's "1,2,4". The first value is taken as
// pflag would take it; the following arguments join only while they are
// plain numbers, so "--input-len -3" still reaches the flag (and its error)
// and a stray word stays a positional argument.
func joinListValues(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		f := fs.Lookup(name)
		if !strings.HasPrefix(a, "--") || f == nil || !strings.HasSuffix(f.Value.Type(), "Slice") {
			out = append(out, a)
			continue
		}
		values := []string{value}
		if !hasValue {
			if i+1 == len(args) {
				out = append(out, a) // pflag reports the missing value
				continue
			}
			i++
			values = []string{args[i]}
		}
		for i+1 < len(args) && numberList.MatchString(args[i+1]) {
			i++
			values = append(values, args[i])
		}
		out = append(out, "--"+name+"="+strings.Join(values, ","))
	}
	return out
}
