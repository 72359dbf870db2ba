package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
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

// flagAliases are vLLM's and SGLang's spellings of our flags, where the
// meaning is the same. Besides them, an underscore in any flag's name is a
// dash (--batch_size is --batch-size).
var flagAliases = map[string]string{
	"tensor-parallel-size": "tp-size",            // vllm bench latency
	"tp":                   "tp-size",            // SGLang's --tp; vLLM's -tp (see shortAliases)
	"enforce-eager":        "disable-cuda-graph", // vllm bench latency: no CUDA graphs
}

// shortAliases are single-dash spellings pflag would read as shorthands.
var shortAliases = map[string]string{"-tp": "--tp-size"}

// normalizeFlag is every flag set's NormalizeFunc: underscores as dashes,
// then flagAliases.
func normalizeFlag(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	name = strings.ReplaceAll(name, "_", "-")
	if to, ok := flagAliases[name]; ok {
		name = to
	}
	return pflag.NormalizedName(name)
}

// rewriteShortAliases turns "-tp 2" into "--tp-size 2" where fs has the
// flag, before pflag reads "-tp" as -t -p.
func rewriteShortAliases(fs *pflag.FlagSet, args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		short, value, hasValue := strings.Cut(a, "=")
		if long, ok := shortAliases[short]; ok && fs.Lookup(strings.TrimPrefix(long, "--")) != nil {
			out[i] = long
			if hasValue {
				out[i] += "=" + value
			}
		}
	}
	return out
}

// aliasHelp lists the aliases of fs's flags, for --help ("" when none applies).
func aliasHelp(fs *pflag.FlagSet) string {
	byTarget := map[string][]string{}
	for from, to := range flagAliases {
		if fs.Lookup(to) != nil {
			byTarget[to] = append(byTarget[to], "--"+from)
		}
	}
	for from, to := range shortAliases {
		if t := strings.TrimPrefix(to, "--"); fs.Lookup(t) != nil {
			byTarget[t] = append(byTarget[t], from)
		}
	}
	var lines []string
	for to, froms := range byTarget {
		slices.Sort(froms)
		lines = append(lines, fmt.Sprintf("  %s = --%s", strings.Join(froms, ", "), to))
	}
	slices.Sort(lines)
	return "aliases (vLLM's and SGLang's spellings; also any flag with _ for -, as --batch_size):\n" + strings.Join(lines, "\n") + "\n"
}

// flagError rewrites pflag's errors into one line naming the flag: an
// unknown flag with the nearest known one, a bad list item by its place.
func flagError(fs *pflag.FlagSet, err error) error {
	var notExist *pflag.NotExistError
	if errors.As(err, &notExist) && notExist.GetSpecifiedName() != "" {
		name := notExist.GetSpecifiedName()
		if near := nearestFlag(fs, name); near != "" {
			return usagef("unknown flag --%s (did you mean --%s? 'stepbench %s --help' lists every flag)", name, near, strings.TrimPrefix(fs.Name(), "stepbench "))
		}
		return usagef("unknown flag --%s ('stepbench %s --help' lists every flag)", name, strings.TrimPrefix(fs.Name(), "stepbench "))
	}
	var invalid *pflag.InvalidValueError
	var bad listError
	if errors.As(err, &invalid) && errors.As(err, &bad) {
		value := invalid.GetValue()
		if len(value) > 40 {
			value = value[:40] + "..." // a list of 20,000 items is not repeated
		}
		return usagef("--%s %q: %v", invalid.GetFlag().Name, value, bad)
	}
	return usageError{err}
}

// nearestFlag is the flag of fs whose name is closest to name (within an
// edit distance of a third of its length, at least 2), or one that holds it;
// "" when none is near.
func nearestFlag(fs *pflag.FlagSet, name string) string {
	best, bestDist := "", max(2, len(name)/3)+1
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		if d < bestDist || (d == bestDist && best != "" && f.Name < best) {
			best, bestDist = f.Name, d
		}
	})
	if best != "" {
		return best
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if best == "" && len(name) >= 4 && (strings.Contains(f.Name, name) || len(f.Name) >= 3 && strings.Contains(name, f.Name)) {
			best = f.Name
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// intList is a list flag of positive or zero whole numbers, "1,2,4" (one_batch's
// "1 2 4" is joined before parsing, see joinListValues); a repeated flag
// adds to the list. An empty list or a bad item is refused naming it.
type intList struct {
	values  *[]int
	changed bool
}

// listError is a bad list value: its text names the item.
type listError struct{ msg string }

func (e listError) Error() string { return e.msg }

func newIntList(p *[]int, defaults []int) *intList {
	*p = slices.Clone(defaults)
	return &intList{values: p}
}

func (l *intList) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return listError{"empty list: give one or more whole numbers, e.g. 1,2,4"}
	}
	items := strings.Split(s, ",")
	var parsed []int
	if l.changed {
		parsed = *l.values
	}
	for i, item := range items {
		v, err := strconv.Atoi(strings.TrimSpace(item))
		switch {
		case strings.TrimSpace(item) == "":
			return listError{fmt.Sprintf("item %d of %d is empty", i+1, len(items))}
		case errors.Is(err, strconv.ErrRange):
			return listError{fmt.Sprintf("item %d of %d, %s, is a whole number too large to count (at most %d; the flag's own limit is far lower)",
				i+1, len(items), strings.TrimSpace(item), math.MaxInt64)}
		case err != nil:
			return listError{fmt.Sprintf("item %d of %d, %q, is not a whole number", i+1, len(items), item)}
		case slices.Contains(parsed, v):
			return listError{fmt.Sprintf("item %d of %d, %d, is listed twice: each shape is timed once", i+1, len(items), v)}
		}
		parsed = append(parsed, v)
	}
	*l.values, l.changed = parsed, true
	return nil
}

// Type ends in "Slice", as pflag's lists, so that joinListValues joins it.
func (l *intList) Type() string { return "intSlice" }

// String is pflag's IntSlice's: "[1,2,4]".
func (l *intList) String() string {
	parts := make([]string, len(*l.values))
	for i, v := range *l.values {
		parts[i] = strconv.Itoa(v)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// intListVar adds a list flag of whole numbers.
func intListVar(fs *pflag.FlagSet, p *[]int, name string, defaults []int, usage string) {
	fs.Var(newIntList(p, defaults), name, usage)
}

// usageText writes a command's flags and, where they apply, their aliases.
func usageText(fs *pflag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage of %s:\n", fs.Name())
	fs.PrintDefaults()
	for _, to := range flagAliases {
		if fs.Lookup(to) != nil {
			fmt.Fprint(w, "\n"+aliasHelp(fs))
			break
		}
	}
	if fs.Lookup("gpu-memory-utilization") != nil {
		fmt.Fprint(w, servingHelp())
	}
}
