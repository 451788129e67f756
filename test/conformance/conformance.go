// Package conformance runs Karpenter's own regression suite
// (sigs.k8s.io/karpenter/test/suites/regression, from the pinned module,
// never copied) against the simulated world of `make world`: see
// docs/conformance.md and cmd/conformance, which `make conformance` runs.
//
// This package holds what the runner decides on its own: which specs are not
// applicable to this provider (skip.txt, one line per spec with its reason),
// the Ginkgo skip expression built from them, and the one-line summary read
// from the suite's Ginkgo JSON report. The default NodeClass and NodePool
// the suite copies for every spec are nodeclass.yaml and nodepool.yaml here.
package conformance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// Separator splits a line of skip.txt into the spec's text and the reason.
const Separator = " :: "

// Skip is one line of skip.txt: every spec whose full text (its containers'
// texts and its own, joined by spaces, as Ginkgo prints it) contains Spec is
// not applicable to this provider, for Reason.
type Skip struct {
	Spec   string
	Reason string
	Line   int
}

// ParseSkips reads skip.txt: blank lines and lines starting with # are
// comments; every other line is `<spec text> :: <reason>`. A line without a
// reason is an error, so no spec is skipped without one being written down.
func ParseSkips(r io.Reader) ([]Skip, error) {
	var skips []Skip
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		spec, reason, ok := strings.Cut(line, Separator)
		spec, reason = strings.TrimSpace(spec), strings.TrimSpace(reason)
		if !ok || spec == "" || reason == "" {
			return nil, fmt.Errorf("line %d: want `<spec text>%s<reason>`, got %q", n, Separator, line)
		}
		if prev, dup := seen[spec]; dup {
			return nil, fmt.Errorf("line %d: %q already skipped on line %d", n, spec, prev)
		}
		seen[spec] = n
		skips = append(skips, Skip{Spec: spec, Reason: reason, Line: n})
	}
	return skips, sc.Err()
}

// ReadSkipFile parses the skip file at path (ParseSkips), naming the file
// in its errors.
func ReadSkipFile(path string) ([]Skip, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	skips, err := ParseSkips(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return skips, nil
}

// SkipExpression is the --ginkgo.skip regular expression that skips exactly
// the specs the skips name: their texts are matched literally, so a spec name
// with parentheses or dots needs no escaping in skip.txt. Empty when there is
// nothing to skip (Ginkgo then skips nothing).
func SkipExpression(skips []Skip) string {
	if len(skips) == 0 {
		return ""
	}
	parts := make([]string, len(skips))
	for i, s := range skips {
		parts[i] = regexp.QuoteMeta(s.Spec)
	}
	return strings.Join(parts, "|")
}

// Match returns the skip that names the spec with this full text, if any.
func Match(skips []Skip, fullText string) (Skip, bool) {
	for _, s := range skips {
		if strings.Contains(fullText, s.Spec) {
			return s, true
		}
	}
	return Skip{}, false
}

// Spec is the outcome of one spec the run counted.
type Spec struct {
	Text    string
	RunTime time.Duration
	// Failure is Ginkgo's message and location for a failed spec; Reason the
	// skip.txt reason for one not applicable.
	Failure string
	Reason  string
}

// Summary counts a run's specs. Specs outside the run's focus are neither
// run nor counted in the total, only in OutsideFocus.
type Summary struct {
	Passed, Failed, NotApplicable []Spec
	OutsideFocus                  int
	RunTime                       time.Duration
}

// Total is the number of specs the run counted: passed, failed and not
// applicable.
func (s Summary) Total() int { return len(s.Passed) + len(s.Failed) + len(s.NotApplicable) }

// Line is the run's last line, the one `make conformance` promises.
func (s Summary) Line() string {
	return fmt.Sprintf("conformance: %d passed, %d failed, %d not applicable (total %d)",
		len(s.Passed), len(s.Failed), len(s.NotApplicable), s.Total())
}

// ReadReport decodes a Ginkgo JSON report (--ginkgo.json-report): one
// report per suite.
func ReadReport(r io.Reader) ([]types.Report, error) {
	var reports []types.Report
	if err := json.NewDecoder(r).Decode(&reports); err != nil {
		return nil, fmt.Errorf("ginkgo JSON report: %w", err)
	}
	return reports, nil
}

// Summarize counts the specs (It and table entries; the suite's setup nodes
// are not specs) of the reports. A skipped spec is not applicable when a
// skip names it or the spec skipped itself at run time, and outside the
// focus otherwise; a pending spec is outside
// the focus too, as Ginkgo never runs it. A failure in a suite-level node
// (BeforeSuite, AfterSuite) counts as a failed spec of its own, so a run
// whose setup broke never ends with 0 failed.
func Summarize(reports []types.Report, skips []Skip) Summary {
	var s Summary
	for _, r := range reports {
		s.RunTime += r.RunTime
		for _, sr := range r.SpecReports {
			text := sr.FullText()
			if sr.LeafNodeType != types.NodeTypeIt {
				if sr.Failed() {
					s.Failed = append(s.Failed, Spec{Text: "[" + sr.LeafNodeType.String() + "] " + text, RunTime: sr.RunTime, Failure: failure(sr)})
				}
				continue
			}
			switch {
			case sr.State == types.SpecStatePassed:
				s.Passed = append(s.Passed, Spec{Text: text, RunTime: sr.RunTime})
			case sr.Failed():
				s.Failed = append(s.Failed, Spec{Text: text, RunTime: sr.RunTime, Failure: failure(sr)})
			default:
				if k, ok := Match(skips, text); ok {
					s.NotApplicable = append(s.NotApplicable, Spec{Text: text, Reason: k.Reason})
				} else if sr.State == types.SpecStateSkipped && sr.Failure.Message != "" {
					// The spec ran and called Skip itself (say, for a Kubernetes version): the suite's own reason.
					s.NotApplicable = append(s.NotApplicable, Spec{Text: text, Reason: "skipped by the suite: " + sr.Failure.Message})
				} else {
					s.OutsideFocus++
				}
			}
		}
	}
	for _, l := range [][]Spec{s.Passed, s.Failed, s.NotApplicable} {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Text < l[j].Text })
	}
	return s
}

// failure is a failed spec's message and where it failed, on one line.
func failure(sr types.SpecReport) string {
	msg := strings.Join(strings.Fields(sr.Failure.Message), " ")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return fmt.Sprintf("%s: %s (%s)", sr.State, msg, sr.Failure.Location)
}

// Report writes the specs of each outcome, one per line, then Line.
func (s Summary) Report(w io.Writer) {
	for _, p := range s.Passed {
		fmt.Fprintf(w, "  passed  %-7s %s\n", p.RunTime.Round(100*time.Millisecond), p.Text)
	}
	for _, f := range s.Failed {
		fmt.Fprintf(w, "  FAILED  %-7s %s\n          %s\n", f.RunTime.Round(100*time.Millisecond), f.Text, f.Failure)
	}
	for _, n := range s.NotApplicable {
		fmt.Fprintf(w, "  n/a             %s\n          %s\n", n.Text, n.Reason)
	}
	if s.OutsideFocus > 0 {
		fmt.Fprintf(w, "  (%d specs outside the focus, not run and not counted)\n", s.OutsideFocus)
	}
	fmt.Fprintf(w, "suite ran %s\n", s.RunTime.Round(time.Second))
	fmt.Fprintln(w, s.Line())
}
