package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskwrite"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/source"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/terminal"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/units"
)

// Progress modes. human is a line per second, or on a terminal one status
// line redrawn in place.
const (
	progressHuman = "human"
	progressJSON  = "json"
	progressNone  = "none"
)

// progress reports the write on stderr while it runs.
type progress struct {
	w       io.Writer
	mode    string
	status  *terminal.StatusLine // human mode on a terminal
	started time.Time
	// Set as the run goes on; read by the ticker and by messages that the
	// source and the decoder's goroutines log.
	src      atomic.Pointer[source.Reader]
	counters atomic.Pointer[diskwrite.Counters]
	mu       sync.Mutex
	done     chan struct{}
	wg       sync.WaitGroup
}

func newProgress(w io.Writer, mode string, tty bool, started time.Time) *progress {
	p := &progress{w: w, mode: mode, started: started}
	if mode == progressHuman && tty {
		p.status = terminal.NewStatusLine(w)
	}
	return p
}

// interval: a terminal redraws its one line often; a log gets a line a second.
func (p *progress) interval() time.Duration {
	if p.status != nil {
		return 250 * time.Millisecond
	}
	return time.Second
}

func (p *progress) start() {
	if p.mode == progressNone {
		return
	}
	p.done = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.interval())
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.line("")
			case <-p.done:
				return
			}
		}
	}()
}

// stop ends the ticker and prints the last line (done or failed); a dry
// run, and a terminal's status line that never showed, end with none.
func (p *progress) stop(r *report.Report) {
	started := p.done != nil
	if started {
		close(p.done)
		p.wg.Wait()
		p.done = nil
	}
	if p.mode == progressNone || r.DryRun || (p.status != nil && !started) {
		return
	}
	phase := "done"
	if r.Error != nil {
		phase = "failed"
	}
	p.line(phase)
}

func (p *progress) snapshot(phase string) report.Progress {
	el := time.Since(p.started).Seconds()
	pr := report.Progress{Phase: "download", ElapsedSeconds: el}
	if src := p.src.Load(); src != nil {
		pr.BytesIn = src.Offset()
		if s := src.Size(); s > 0 {
			pr.TotalIn = s
		}
	}
	if c := p.counters.Load(); c != nil {
		pr.BytesOut = c.Out.Load()
		if ph, ok := c.Phase.Load().(string); ok {
			pr.Phase = ph
		}
	}
	if phase != "" {
		pr.Phase = phase
	}
	if el > 0 {
		pr.RawMBps = float64(pr.BytesOut) / 1e6 / el
	}
	if pr.TotalIn > 0 && pr.BytesIn > 0 && pr.BytesIn < pr.TotalIn {
		pr.ETASeconds = el * float64(pr.TotalIn-pr.BytesIn) / float64(pr.BytesIn)
	}
	return pr
}

func (p *progress) line(phase string) {
	pr := p.snapshot(phase)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.mode == progressJSON:
		b, _ := json.Marshal(pr)
		fmt.Fprintf(p.w, "%s\n", b)
	case p.status != nil && (pr.Phase == "done" || pr.Phase == "failed"):
		p.status.Finish(statusText(pr))
	case p.status != nil:
		p.status.Update(statusText(pr))
	default:
		in := fmt.Sprintf("%.1f MB in", float64(pr.BytesIn)/1e6)
		if pr.TotalIn > 0 {
			in = fmt.Sprintf("%.1f/%.1f MB in (%.0f%%)", float64(pr.BytesIn)/1e6, float64(pr.TotalIn)/1e6, 100*float64(pr.BytesIn)/float64(pr.TotalIn))
		}
		eta := ""
		if pr.ETASeconds > 0 {
			eta = fmt.Sprintf(", ETA %.0fs", pr.ETASeconds)
		}
		fmt.Fprintf(p.w, "em-imager: %-8s %s, %.1f MB written, %.1f MB/s, %.0fs elapsed%s\n", pr.Phase, in, float64(pr.BytesOut)/1e6, pr.RawMBps, pr.ElapsedSeconds, eta)
	}
}

// statusText is the terminal's status line:
//
//	write    [#########-----------]  45%  22.7/50.4 MB in  118 MB written  98.2 MB/s  ETA 3s
func statusText(pr report.Progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s ", pr.Phase)
	if pr.TotalIn > 0 {
		frac := min(float64(pr.BytesIn)/float64(pr.TotalIn), 1)
		const width = 20
		full := int(frac * width)
		fmt.Fprintf(&b, "[%s%s] %3.0f%%  %s/%s in", strings.Repeat("#", full), strings.Repeat("-", width-full), 100*frac,
			units.Bytes(pr.BytesIn), units.Bytes(pr.TotalIn))
	} else {
		fmt.Fprintf(&b, "%s in", units.Bytes(pr.BytesIn))
	}
	fmt.Fprintf(&b, "  %s written  %s", units.Bytes(pr.BytesOut), units.Rate(pr.RawMBps*1e6))
	if pr.ETASeconds > 0 {
		fmt.Fprintf(&b, "  ETA %s", units.Duration(time.Duration(pr.ETASeconds*float64(time.Second))))
	} else {
		fmt.Fprintf(&b, "  %s", units.Duration(time.Duration(pr.ElapsedSeconds*float64(time.Second))))
	}
	return b.String()
}

// message reports a warning or retry notice in the progress stream's format.
func (p *progress) message(format string, args ...any) {
	if p.mode == progressNone {
		return
	}
	msg := fmt.Sprintf(format, args...)
	pr := p.snapshot("")
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.mode == progressJSON:
		pr.Message = msg
		b, _ := json.Marshal(pr)
		fmt.Fprintf(p.w, "%s\n", b)
	case p.status != nil:
		p.status.Println("em-imager: " + msg)
	default:
		fmt.Fprintf(p.w, "em-imager: %s\n", msg)
	}
}

// say prints a line for a person (human mode only: json keeps stderr
// JSON lines, none keeps it quiet).
func (p *progress) say(format string, args ...any) {
	if p.mode != progressHuman {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if p.status != nil {
		p.status.Println(msg)
		return
	}
	fmt.Fprintln(p.w, msg)
}
