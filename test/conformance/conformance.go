// Package conformance runs Karpenter's own regression suite
// (sigs.k8s.io/karpenter/test/suites/regression, from the pinned module,
// never copied) against the simulated world of `make world`: see
// docs/conformance.md and cmd/conformance, which `make conformance` runs.
//
// This package holds what the runner decides on its own: which specs are not
// applicable to this provider (skip.txt, one line per spec with its reason),
// which specs run in which pass with which NodeClass and NodePool (Plan:
// nodeclass.yaml and nodepool.yaml for most, a sizing's own files for the
// specs the suite sizes for smaller nodes), and the one-line summary summed
// from each pass's Ginkgo JSON report.
package conformance

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// Add counts another pass's specs in s.
func (s *Summary) Add(o Summary) {
	s.Passed = append(s.Passed, o.Passed...)
	s.Failed = append(s.Failed, o.Failed...)
	s.NotApplicable = append(s.NotApplicable, o.NotApplicable...)
	s.OutsideFocus += o.OutsideFocus
	s.RunTime += o.RunTime
	s.sort()
}

// sort orders each outcome's specs by text, as the report prints them.
func (s *Summary) sort() {
	for _, l := range [][]Spec{s.Passed, s.Failed, s.NotApplicable} {
		sort.SliceStable(l, func(i, j int) bool { return l[i].Text < l[j].Text })
	}
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

// Sizing names the specs the suite sizes for nodes other than the default
// NodeClass and NodePool make here, and the files (in test/conformance)
// that make such nodes; those specs run in a pass of their own.
type Sizing struct {
	Spec                string
	NodeClass, NodePool string
}

// Sizings lists the specs sized for other nodes. The suite sizes its
// CapacityBuffer specs for 2-CPU nodes (its BeforeEach, for KWOK:
// "Constrain to small instances (2 CPU) so buffer pods force multiple
// nodes"); the smallest offers with 2200m reserved for the kubelet are the
// nearest here (docs/conformance.md, "CapacityBuffer").
var Sizings = []Sizing{{Spec: "CapacityBuffer", NodeClass: "nodeclass-capacitybuffer.yaml", NodePool: "nodepool-capacitybuffer.yaml"}}

// Pass is one run of the suite on a world of its own: the full texts of the
// specs it runs and the NodeClass and NodePool they run with.
type Pass struct {
	Name                string
	NodeClass, NodePool string
	Specs               []string
}

// Plan is what a run does with each spec of the suite: it runs it in exactly
// one pass, counts it not applicable (skip.txt), or leaves it outside the
// focus.
type Plan struct {
	// Description is the suite's, which Ginkgo puts before a spec's text
	// when it matches a focus.
	Description   string
	Passes        []Pass
	NotApplicable []Spec
	OutsideFocus  int
}

// Specs are the full texts of the specs (It and table entries, not pending)
// in a report, such as the one of a --ginkgo.dry-run, and the suite's
// description.
func Specs(reports []types.Report) (description string, specs []string) {
	for _, r := range reports {
		description = r.SuiteDescription
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && sr.State != types.SpecStatePending {
				specs = append(specs, sr.FullText())
			}
		}
	}
	return description, specs
}

// MakePlan splits the specs: outside the focus (nil focuses on all; matched
// as Ginkgo does, against the suite's description and the spec's text),
// not applicable when a skip names it, in the pass of the first sizing that
// names it (named for the sizing's spec, its files in dir), and in the
// default pass otherwise. Passes without a spec are left out.
func MakePlan(description string, specs []string, focus *regexp.Regexp, skips []Skip, def Pass, sizings []Sizing, dir string) Plan {
	p := Plan{Description: description}
	passes := []Pass{def}
	for _, z := range sizings {
		passes = append(passes, Pass{Name: strings.ToLower(z.Spec),
			NodeClass: filepath.Join(dir, z.NodeClass), NodePool: filepath.Join(dir, z.NodePool)})
	}
	for _, text := range specs {
		if focus != nil && !focus.MatchString(description+" "+text) {
			p.OutsideFocus++
			continue
		}
		if k, ok := Match(skips, text); ok {
			p.NotApplicable = append(p.NotApplicable, Spec{Text: text, Reason: k.Reason})
			continue
		}
		i := 0
		for j, z := range sizings {
			if strings.Contains(text, z.Spec) {
				i = j + 1
				break
			}
		}
		passes[i].Specs = append(passes[i].Specs, text)
	}
	for _, ps := range passes {
		if len(ps.Specs) > 0 {
			p.Passes = append(p.Passes, ps)
		}
	}
	return p
}

// Focus is the --ginkgo.focus expression that selects exactly the pass's
// specs: each whole text, literally.
func (p Plan) Focus(ps Pass) string {
	parts := make([]string, len(ps.Specs))
	for i, t := range ps.Specs {
		parts[i] = regexp.QuoteMeta(p.Description + " " + t)
	}
	return "^(?:" + strings.Join(parts, "|") + ")$"
}

// Shard splits every pass into up to n passes of its own (named
// <pass>-<i>), so that the worlds of a run with n at once finish at about
// the same time. took holds how long specs took in an earlier run
// (Durations): the longest spec goes first, each to the shard with the
// least time so far, a spec not in took counting for the mean of those
// that are. Without durations every spec counts the same and the specs,
// sorted by text, are dealt in turn, so that each shard gets a part of
// every group of specs.
func (p Plan) Shard(n int, took map[string]time.Duration) Plan {
	if n <= 1 {
		return p
	}
	var passes []Pass
	for _, ps := range p.Passes {
		k := min(n, len(ps.Specs))
		shards := make([]Pass, k)
		load := make([]time.Duration, k)
		for i := range shards {
			shards[i] = Pass{Name: fmt.Sprintf("%s-%d", ps.Name, i+1), NodeClass: ps.NodeClass, NodePool: ps.NodePool}
		}
		est := estimates(ps.Specs, took)
		specs := slices.Sorted(slices.Values(ps.Specs))
		slices.SortStableFunc(specs, func(a, b string) int { return cmp.Compare(est[b], est[a]) })
		for _, t := range specs {
			i := 0
			for j := range shards {
				if load[j] < load[i] || (load[j] == load[i] && len(shards[j].Specs) < len(shards[i].Specs)) {
					i = j
				}
			}
			shards[i].Specs = append(shards[i].Specs, t)
			load[i] += est[t]
		}
		for i := range shards {
			shards[i].Specs = slices.Sorted(slices.Values(shards[i].Specs))
		}
		passes = append(passes, shards...)
	}
	p.Passes = passes
	return p
}

// estimates is how long each spec is expected to take: its time in took, or
// the mean of the specs that have one.
func estimates(specs []string, took map[string]time.Duration) map[string]time.Duration {
	var sum time.Duration
	known := 0
	for _, t := range specs {
		if d, ok := took[t]; ok {
			sum += d
			known++
		}
	}
	mean := time.Duration(0)
	if known > 0 {
		mean = sum / time.Duration(known)
	}
	est := make(map[string]time.Duration, len(specs))
	for _, t := range specs {
		d, ok := took[t]
		if !ok {
			d = mean
		}
		est[t] = d
	}
	return est
}

// Durations is how long each spec that ran took, by full text, from the
// reports of an earlier run (Shard's took).
func Durations(reports []types.Report) map[string]time.Duration {
	took := map[string]time.Duration{}
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			if sr.LeafNodeType == types.NodeTypeIt && (sr.State == types.SpecStatePassed || sr.State.Is(types.SpecStateFailureStates)) {
				took[sr.FullText()] = sr.RunTime
			}
		}
	}
	return took
}

// Outcome counts a pass's report against the specs it planned. A spec the
// suite skipped itself at run time (say, for a Kubernetes version) is not
// applicable, with the suite's reason. A planned spec the report does not
// show passed, failed or skipped by the suite failed: the run stopped
// before it. A failure in a suite-level node (BeforeSuite, AfterSuite)
// counts as a failed spec of its own, so a run whose setup broke never ends
// with 0 failed.
func (ps Pass) Outcome(reports []types.Report) Summary {
	var s Summary
	seen := map[string]bool{}
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
			case sr.State == types.SpecStateSkipped && sr.Failure.Message != "":
				s.NotApplicable = append(s.NotApplicable, Spec{Text: text, Reason: "skipped by the suite: " + sr.Failure.Message})
			default:
				continue
			}
			seen[text] = true
		}
	}
	for _, t := range ps.Specs {
		if !seen[t] {
			s.Failed = append(s.Failed, Spec{Text: t, Failure: "not run: the " + ps.Name + " pass stopped before it"})
		}
	}
	s.sort()
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
