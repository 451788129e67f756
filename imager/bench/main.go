// Command bench measures em-imager against the shell pipelines it replaces
// (`make bench` runs it):
//
//	go run ./imager/bench -imager bin/em-imager -cache .cache/imager-bench
//
// It builds a Talos-like image once (real GPT, mostly zeros, a few hundred
// MB of random data), compresses it like Talos (xz -0 -T0 with independent
// 1 MiB blocks, zstd -T0 -18), caches the artefacts, serves them over
// loopback HTTP and writes each with O_DIRECT onto a fresh sparse file on
// the cache's filesystem, printing MB/s of raw image written, CPU seconds
// per GB and em-imager's peak RSS; xz at 1, 2 and GOMAXPROCS decoder
// workers. A smaller image compressed with xz -6 -T0 (24 MiB blocks) and
// xz -9 -T0 (192 MiB blocks, 64 MiB dictionary) shows the memory bound.
// The machine may be shared: each case runs -runs times, the load average
// is printed per case, and CPU seconds are the steadier figure.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/testimage"
)

func main() {
	imager := flag.String("imager", "bin/em-imager", "em-imager binary to measure")
	cache := flag.String("cache", ".cache/imager-bench", "directory for the image and its compressed copies (reused) and the target file; must support O_DIRECT")
	sizeMB := flag.Int64("size-mib", 1400, "raw image size in MiB")
	dataMB := flag.Int64("data-mib", 200, "random data in the image, MiB")
	runs := flag.Int("runs", 3, "runs per case; the best wall time and the median CPU are reported (the machine is shared)")
	flag.Parse()
	if err := run(*imager, *cache, *sizeMB<<20, *dataMB<<20, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type result struct {
	name    string
	seconds float64 // best of the runs
	cpu     float64 // median user+sys seconds of the process and the children it waited for
	rssKiB  int64   // largest of the runs
	load    string  // 1-minute load average before the first run and after the last
}

func run(imager, cache string, size, data int64, runs int) error {
	if err := checkTools(); err != nil {
		return err
	}
	imager, _ = filepath.Abs(imager)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	raw := filepath.Join(cache, "metal-amd64.raw")
	sha, err := buildImages(cache, raw, size, data)
	if err != nil {
		return err
	}
	memRaw, memSha, err := memoryImages(cache)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(l, http.FileServer(http.Dir(cache)))
	st, _ := os.Stat(raw)
	b := bench{
		imager: imager, raw: raw, sha: sha, memRaw: memRaw, memSha: memSha,
		base:     "http://" + l.Addr().String() + "/",
		target:   filepath.Join(cache, "target.disk"),
		rawBytes: st.Size(),
	}
	// Warm the page cache so the source side costs the same for everyone.
	for _, f := range []string{raw, raw + ".xz", raw + ".zst"} {
		exec.Command("cat", f).Run()
	}
	results := map[string]result{}
	fmt.Printf("  %-52s %8s %9s %8s %9s %9s  %s\n", "case", "wall", "MB/s", "CPU", "CPU s/GB", "peak RSS", "load 1m before/after")
	for _, c := range b.cases() {
		best, err := b.measure(c, runs)
		if err != nil {
			return err
		}
		results[c.name] = best
		b.printCase(c, best)
	}
	os.Remove(b.target)
	b.summarize(results, runs)
	return nil
}

// checkTools fails early when a tool the pipelines or the image build need is missing.
func checkTools() error {
	for _, tool := range []string{"xz", "zstd", "curl", "dd", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (make deps installs xz-utils, zstd, curl)", tool)
		}
	}
	return nil
}

// buildImages returns the raw image's SHA-256, building the image and its .xz and .zst copies
// unless the cache holds them for this spec already (spec.json records the spec and the sum).
func buildImages(cache, raw string, size, data int64) (string, error) {
	stamp := filepath.Join(cache, "spec.json")
	spec := fmt.Sprintf(`{"size":%d,"data":%d,"seed":1,"v":1}`, size, data)
	if b, err := os.ReadFile(stamp); err == nil && strings.HasPrefix(string(b), spec) {
		sha := strings.TrimSpace(strings.TrimPrefix(string(b), spec))
		if sha != "" && exists(raw+".xz") && exists(raw+".zst") {
			return sha, nil
		}
	}
	fmt.Printf("building a %d MiB Talos-like image (%d MiB random data) in %s ...\n", size>>20, data>>20, cache)
	sha, err := testimage.Write(raw, testimage.Spec{Size: size, DataBytes: data, Seed: 1})
	if err != nil {
		return "", err
	}
	for _, c := range [][]string{
		{"xz", "-0", "-T0", "--block-size=1MiB", "-k", "-f", raw},
		{"zstd", "-q", "-T0", "-18", "-f", "-k", raw, "-o", raw + ".zst"},
	} {
		t0 := time.Now()
		fmt.Printf("  %s ...", strings.Join(c, " "))
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%v: %w: %s", c, err, out)
		}
		fmt.Printf(" %.0fs\n", time.Since(t0).Seconds())
	}
	return sha, os.WriteFile(stamp, []byte(spec+sha+"\n"), 0o644)
}

// bench is what the cases share: the binary measured, the images served at base, and the
// target file each run writes.
type bench struct {
	imager, raw, sha, memRaw, memSha string
	base, target                     string
	rawBytes                         int64
}

// benchCase is one measured write: a shell pipeline, or em-imager write with args.
type benchCase struct {
	name   string
	shell  string   // pipeline
	args   []string // em-imager write args
	oneCPU bool
	bytes  int64 // raw bytes written, when not the big image's
}

// imagerArgs is an em-imager write of file (served at base) onto the target.
func (b bench) imagerArgs(file string, extra ...string) []string {
	digest := b.sha
	if strings.HasPrefix(file, filepath.Base(b.memRaw)) {
		digest = b.memSha
	}
	return append([]string{"write", "--image", b.base + file, "--sha256", digest, "--disk", b.target, "--format", "auto", "--progress", "none"}, extra...)
}

// xzAllName is the case of em-imager decoding xz with a worker per GOMAXPROCS.
func xzAllName() string {
	return fmt.Sprintf("em-imager .raw.xz, GOMAXPROCS (%d) workers", runtime.GOMAXPROCS(0))
}

// cases lists the measured writes, pipelines beside the em-imager runs they compare with.
func (b bench) cases() []benchCase {
	dd := "dd of=" + b.target + " bs=4M iflag=fullblock oflag=direct conv=notrunc status=none"
	mem := filepath.Base(b.memRaw)
	memSt, _ := os.Stat(b.memRaw)
	return []benchCase{
		{name: "dd oflag=direct of the raw image (physical limit)", shell: "dd if=" + b.raw + " of=" + b.target + " bs=4M oflag=direct conv=notrunc status=none"},
		{name: "curl | xz -dc | dd oflag=direct", shell: "curl -sf " + b.base + "metal-amd64.raw.xz | xz -dc | " + dd},
		{name: "curl | xz -T0 -dc | dd oflag=direct", shell: "curl -sf " + b.base + "metal-amd64.raw.xz | xz -T0 -dc | " + dd},
		{name: "em-imager .raw.xz, 1 worker", args: b.imagerArgs("metal-amd64.raw.xz", "--concurrency", "1")},
		{name: "em-imager .raw.xz, 2 workers", args: b.imagerArgs("metal-amd64.raw.xz", "--concurrency", "2")},
		{name: xzAllName(), args: b.imagerArgs("metal-amd64.raw.xz")},
		{name: "em-imager .raw.xz, 1 core (taskset)", args: b.imagerArgs("metal-amd64.raw.xz"), oneCPU: true},
		{name: "curl | zstd -dc | dd oflag=direct", shell: "curl -sf " + b.base + "metal-amd64.raw.zst | zstd -dc | " + dd},
		{name: "em-imager .raw.zst, all cores", args: b.imagerArgs("metal-amd64.raw.zst")},
		{name: "em-imager .raw.zst, 1 core", args: b.imagerArgs("metal-amd64.raw.zst"), oneCPU: true},
		{name: "em-imager .raw (uncompressed), all cores", args: b.imagerArgs("metal-amd64.raw")},
		{name: "xz -6 -T0 (24 MiB blocks): curl | xz -dc | dd", shell: "curl -sf " + b.base + mem + ".6.xz | xz -dc | " + dd, bytes: memSt.Size()},
		{name: "xz -6 -T0 (24 MiB blocks): em-imager", args: b.imagerArgs(mem + ".6.xz"), bytes: memSt.Size()},
		{name: "xz -9 -T0 (192 MiB blocks): curl | xz -dc | dd", shell: "curl -sf " + b.base + mem + ".9.xz | xz -dc | " + dd, bytes: memSt.Size()},
		{name: "xz -9 -T0 (192 MiB blocks): em-imager", args: b.imagerArgs(mem + ".9.xz"), bytes: memSt.Size()},
	}
}

// fresh recreates the target as an empty sparse file with room for the image.
func (b bench) fresh() error {
	os.Remove(b.target)
	f, err := os.Create(b.target)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(b.rawBytes + 64<<20)
}

// measure runs a case runs times: the best wall time, the median CPU, the largest RSS.
func (b bench) measure(c benchCase, runs int) (result, error) {
	best := result{name: c.name, load: loadavg()}
	var cpus []float64
	for i := 0; i < runs; i++ {
		secs, cpu, rss, err := b.once(c)
		if err != nil {
			return best, err
		}
		if best.seconds == 0 || secs < best.seconds {
			best.seconds = secs
		}
		cpus = append(cpus, cpu)
		best.rssKiB = max(best.rssKiB, rss)
	}
	sort.Float64s(cpus)
	best.cpu = cpus[len(cpus)/2]
	best.load += "/" + loadavg()
	return best, nil
}

// command is the process a case runs.
func (b bench) command(c benchCase) *exec.Cmd {
	switch {
	case c.shell != "":
		return exec.Command("bash", "-o", "pipefail", "-c", c.shell)
	case c.oneCPU:
		cmd := exec.Command("taskset", append([]string{"-c", "0", b.imager}, c.args...)...)
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		return cmd
	}
	return exec.Command(b.imager, c.args...)
}

// once runs a case on a fresh target: wall seconds, CPU seconds and peak RSS; an em-imager run
// must also report success.
func (b bench) once(c benchCase) (secs, cpu float64, rss int64, err error) {
	if err := b.fresh(); err != nil {
		return 0, 0, 0, err
	}
	exec.Command("sync").Run()
	cmd := b.command(c)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err = cmd.Run()
	secs = time.Since(t0).Seconds()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%s: %w\n%s%s", c.name, err, out.String(), errb.String())
	}
	if c.shell == "" {
		var rep report.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil || !rep.OK {
			return 0, 0, 0, fmt.Errorf("%s: report %s", c.name, out.String())
		}
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return secs, cpu, rss, nil
}

// printCase prints a case's line of the table.
func (b bench) printCase(c benchCase, best result) {
	n := b.rawBytes
	if c.bytes > 0 {
		n = c.bytes
	}
	rssCol := ""
	if c.shell == "" {
		rssCol = fmt.Sprintf("%.0f MiB", float64(best.rssKiB)/1024)
	}
	fmt.Printf("  %-52s %7.2fs %9.1f %7.2fs %9.2f %9s  %s\n", c.name, best.seconds, float64(n)/1e6/best.seconds, best.cpu,
		best.cpu/(float64(n)/1e9), rssCol, best.load)
}

// summarize prints the comparisons the bench exists for, against their goals.
func (b bench) summarize(results map[string]result, runs int) {
	rawBytes := b.rawBytes
	xzSt, _ := os.Stat(b.raw + ".xz")
	zstSt, _ := os.Stat(b.raw + ".zst")
	zeros := zeroFraction(b.raw)
	mbps := func(n string) float64 { return float64(rawBytes) / 1e6 / results[n].seconds }
	var load string
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(la))[:3], " ")
	}
	fmt.Printf("\nload average during the run: %s (wall times on a shared machine depend on it; CPU seconds much less)\n", load)
	fmt.Printf("image: %.2f GB raw (%.1f%% zeros), .xz %.0f MB, .zst %.0f MB; %d CPUs (%s); best of %d\n",
		float64(rawBytes)/1e9, 100*zeros, float64(xzSt.Size())/1e6, float64(zstSt.Size())/1e6, runtime.NumCPU(), runtime.Version(), runs)
	xzAll := xzAllName()
	xzPipe := "curl | xz -dc | dd oflag=direct"
	fmt.Printf("xz:   em-imager %.1f MB/s vs curl|xz -dc|dd %.1f MB/s = %.2fx (goal >= 0.75x); CPU %.2f vs %.2f s/GB\n",
		mbps(xzAll), mbps(xzPipe), mbps(xzAll)/mbps(xzPipe),
		results[xzAll].cpu/(float64(rawBytes)/1e9), results[xzPipe].cpu/(float64(rawBytes)/1e9))
	fmt.Printf("      workers 1 / 2 / %d: %.1f / %.1f / %.1f MB/s\n", runtime.GOMAXPROCS(0),
		mbps("em-imager .raw.xz, 1 worker"), mbps("em-imager .raw.xz, 2 workers"), mbps(xzAll))
	fmt.Printf("zstd: em-imager %.1f MB/s vs curl|zstd -dc|dd %.1f MB/s = %.2fx; vs dd of the raw image %.1f MB/s = %.0f%% (goal >= 85%%)\n",
		mbps("em-imager .raw.zst, all cores"), mbps("curl | zstd -dc | dd oflag=direct"),
		mbps("em-imager .raw.zst, all cores")/mbps("curl | zstd -dc | dd oflag=direct"),
		mbps("dd oflag=direct of the raw image (physical limit)"),
		100*mbps("em-imager .raw.zst, all cores")/mbps("dd oflag=direct of the raw image (physical limit)"))
	var peak int64
	for _, r := range results {
		peak = max(peak, r.rssKiB)
	}
	fmt.Printf("em-imager peak RSS: %.0f MiB (bound 160 MiB); xz -6 -T0 %.0f MiB, xz -9 -T0 %.0f MiB\n", float64(peak)/1024,
		float64(results["xz -6 -T0 (24 MiB blocks): em-imager"].rssKiB)/1024, float64(results["xz -9 -T0 (192 MiB blocks): em-imager"].rssKiB)/1024)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// memoryImages builds (once) a 256 MiB Talos-like image and its xz -6 -T0
// and xz -9 -T0 copies, whose 24 and 192 MiB blocks and 8 and 64 MiB
// dictionaries are what em-imager's memory bound must hold against.
func memoryImages(cache string) (raw, sha string, err error) {
	raw = filepath.Join(cache, "memory.raw")
	stamp := filepath.Join(cache, "memory.json")
	spec := `{"size":268435456,"data":27262976,"seed":2,"v":1}`
	if b, err := os.ReadFile(stamp); err == nil && strings.HasPrefix(string(b), spec) && exists(raw+".6.xz") && exists(raw+".9.xz") {
		return raw, strings.TrimSpace(strings.TrimPrefix(string(b), spec)), nil
	}
	fmt.Printf("building a 256 MiB image for the memory cases in %s ...\n", cache)
	sha, err = testimage.Write(raw, testimage.Spec{Size: 256 << 20, DataBytes: 26 << 20, Seed: 2})
	if err != nil {
		return "", "", err
	}
	for _, level := range []string{"6", "9"} {
		t0 := time.Now()
		fmt.Printf("  xz -%s -T0 ...", level)
		out, err := exec.Command("bash", "-c", "xz -"+level+" -T0 -c "+raw+" > "+raw+"."+level+".xz").CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("xz -%s: %w: %s", level, err, out)
		}
		fmt.Printf(" %.0fs\n", time.Since(t0).Seconds())
	}
	return raw, sha, os.WriteFile(stamp, []byte(spec+sha+"\n"), 0o644)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func zeroFraction(p string) float64 {
	f, err := os.Open(p)
	if err != nil {
		return 0
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	var z, n int64
	zero := make([]byte, 4096)
	for {
		k, err := f.Read(buf)
		for i := 0; i+4096 <= k; i += 4096 {
			if bytes.Equal(buf[i:i+4096], zero) {
				z += 4096
			}
		}
		n += int64(k)
		if err != nil {
			break
		}
	}
	return float64(z) / float64(n)
}
