// Command scalereport reads the output of make bench-scale's benchmarks,
// run at several core counts, and writes the table of each op's median time
// per op at each count, lease beside its peers, into a section of a
// Markdown file, and the chart of throughput against cores into an SVG file.
//
// Usage:
//
//	scalereport -md file -section key -svg file [-before files] bench.txt...
//
// The section is the text between the lines <!-- scale:key --> and
// <!-- /scale:key --> of the Markdown file, replaced whole; it is added at
// the end when the file has no such lines. The machine is named from the
// "nproc:" and "cpu:" lines of the input. Results in the -before files (a
// comma-separated list: the same benchmarks built from an earlier tree) are
// shown as the impl "lease before".
package main

import (
	"bytes"
	"flag"
	"fmt"
	"image/color"
	"io"
	"log"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// An op is one row group of the table and one panel of the chart: a
// benchmark, the unit it is read in, and its impls in the order shown, the
// first being the lease.
type op struct {
	name  string // the benchmark's name, without Benchmark
	title string
	unit  string
	peer  string // the impl the lease is compared with
	impls []string
}

var ops = []op{
	{"ScaleContextRequest", "sig.Context(req) + cancel", "ns/op", "context", []string{"lease", "lease before", "limit", "context"}},
	{"ScaleContextBackground", "sig.Context(Background) + cancel", "ns/op", "context", []string{"lease", "lease before", "limit", "context"}},
	{"ScaleAfterLoss", "AfterLoss + stop", "ns/op", "context", []string{"lease", "lease before", "limit", "context"}},
	{"ScaleErrLive", "Err, live lease", "ns/op", "context", []string{"lease", "lease before", "limit", "context"}},
	{"ScaleErrLost", "Err, lost lease (peer: context.Cause)", "ns/op", "context", []string{"lease", "lease before", "limit", "context"}},
	{"ScaleLose", "Lose, 1,000 contexts from 16 goroutines, per context", "ns/context", "context", []string{"lease", "context"}},
	{"Do", "single-flight Do, one caller", "ns/op", "xsync", []string{"lease", "lease before", "xsync"}},
	{"DoParallel", "single-flight DoParallel, 4 keys", "ns/op", "xsync", []string{"lease", "lease before", "xsync"}},
}

// samples maps op, then impl, then cores to the values of every run.
type samples map[string]map[string]map[int][]float64

// machine is what the input says of the machine: its cores and its CPU.
type machine struct {
	nproc string
	cpu   string
}

func main() {
	md := flag.String("md", "", "write the table into this Markdown file")
	section := flag.String("section", "", "the key of the section of the Markdown file")
	svg := flag.String("svg", "", "write the chart to this SVG file")
	before := flag.String("before", "", "comma-separated files of the same benchmarks from an earlier tree")
	flag.Parse()
	if flag.NArg() == 0 || (*md != "" && *section == "") {
		log.Fatal("usage: scalereport -md file -section key -svg file [-before files] bench.txt...")
	}
	s := make(samples)
	m, err := read(s, flag.Args(), false)
	if err != nil {
		log.Fatal(err)
	}
	if *before != "" {
		if _, err := read(s, strings.Split(*before, ","), true); err != nil {
			log.Fatal(err)
		}
	}
	var table bytes.Buffer
	writeTable(&table, s, m, *svg)
	os.Stdout.Write(table.Bytes())
	if *md != "" {
		if err := replaceSection(*md, *section, table.Bytes()); err != nil {
			log.Fatal(err)
		}
	}
	if *svg != "" {
		if err := chart(*svg, s, m); err != nil {
			log.Fatal(err)
		}
	}
}

// read adds the results of files to s, the lease's as "lease before" with
// before, and returns the machine the first of them names.
func read(s samples, files []string, before bool) (machine, error) {
	var m machine
	fs := benchfmt.Files{Paths: files}
	for fs.Scan() {
		res, ok := fs.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error or a unit line
		}
		if m.nproc == "" {
			m.nproc = res.GetConfig("nproc")
			m.cpu = res.GetConfig("cpu")
		}
		base, parts := res.Name.Parts()
		impl, cores := "", 1
		for _, p := range parts {
			if v, ok := strings.CutPrefix(string(p), "/impl="); ok {
				impl = v
			} else if v, ok := strings.CutPrefix(string(p), "-"); ok {
				if n, err := strconv.Atoi(v); err == nil {
					cores = n
				}
			}
		}
		name := string(base)
		if impl == "" || !slices.ContainsFunc(ops, func(o op) bool { return o.name == name }) {
			continue
		}
		if before {
			if impl != "lease" {
				continue
			}
			impl = "lease before"
		}
		o := ops[slices.IndexFunc(ops, func(o op) bool { return o.name == name })]
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			if unit == "sec/op" {
				unit, val = "ns/op", val*1e9
			}
			if unit != o.unit {
				continue
			}
			if s[name] == nil {
				s[name] = make(map[string]map[int][]float64)
			}
			if s[name][impl] == nil {
				s[name][impl] = make(map[int][]float64)
			}
			s[name][impl][cores] = append(s[name][impl][cores], val)
		}
	}
	return m, fs.Err()
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	sort.Float64s(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

// coreCounts returns the core counts s holds for any op, in order.
func (s samples) coreCounts() []int {
	var cs []int
	for _, impls := range s {
		for _, byCores := range impls {
			for c := range byCores {
				if !slices.Contains(cs, c) {
					cs = append(cs, c)
				}
			}
		}
	}
	sort.Ints(cs)
	return cs
}

func (s samples) median(name, impl string, cores int) (float64, bool) {
	xs := s[name][impl][cores]
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

func (m machine) String() string {
	return fmt.Sprintf("%s cores (nproc), %s", m.nproc, m.cpu)
}

// writeTable writes one Markdown table: for each op, a row per impl with
// its median at each core count, then the lease's median over the limit's
// and over the peer's.
func writeTable(w io.Writer, s samples, m machine, svg string) {
	cores := s.coreCounts()
	runs := 0
	for _, impls := range s {
		for _, byCores := range impls {
			for _, xs := range byCores {
				runs = max(runs, len(xs))
			}
		}
	}
	fmt.Fprintf(w, "Machine: %s. Median of %d runs at each core count (GOMAXPROCS); time per op over all cores\n", m, runs)
	fmt.Fprintf(w, "(b.RunParallel on one shared lease; `limit`: a lease per goroutine, nothing shared), lower is better.\n\n")
	fmt.Fprintf(w, "| op | impl |")
	for _, c := range cores {
		fmt.Fprintf(w, " %d |", c)
	}
	fmt.Fprintf(w, "\n|---|---|")
	for range cores {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	for _, o := range ops {
		if s[o.name] == nil {
			continue
		}
		for _, impl := range o.impls {
			if s[o.name][impl] == nil {
				continue
			}
			fmt.Fprintf(w, "| %s (%s) | %s |", o.title, o.unit, impl)
			for _, c := range cores {
				if v, ok := s.median(o.name, impl, c); ok {
					fmt.Fprintf(w, " %s |", figure(v))
				} else {
					fmt.Fprintf(w, " |")
				}
			}
			fmt.Fprintln(w)
		}
		for _, other := range []string{"limit", o.peer} {
			if s[o.name][other] == nil {
				continue
			}
			fmt.Fprintf(w, "| %s | lease ÷ %s |", o.title, other)
			for _, c := range cores {
				l, ok1 := s.median(o.name, "lease", c)
				p, ok2 := s.median(o.name, other, c)
				if ok1 && ok2 && p > 0 {
					fmt.Fprintf(w, " %.2f× |", l/p)
				} else {
					fmt.Fprintf(w, " |")
				}
			}
			fmt.Fprintln(w)
		}
	}
	if svg != "" {
		fmt.Fprintf(w, "\n![Throughput against cores, lease beside its peers, %s](%s)\n", m, lastElem(svg))
	}
}

func lastElem(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

// figure prints v with three significant digits, as benchstat does.
func figure(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// replaceSection puts body between the section's marker lines in the
// Markdown file at path.
func replaceSection(path, key string, body []byte) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := []byte("<!-- scale:"+key+" -->\n"), []byte("<!-- /scale:"+key+" -->\n")
	var out bytes.Buffer
	i := bytes.Index(old, begin)
	j := bytes.Index(old, end)
	switch {
	case i >= 0 && j > i:
		out.Write(old[:i+len(begin)])
		out.Write(body)
		out.Write(old[j:])
	case i < 0 && j < 0:
		out.Write(old)
		out.WriteString("\n")
		out.Write(begin)
		out.Write(body)
		out.Write(end)
	default:
		return fmt.Errorf("%s: the markers of section %q are not in order", path, key)
	}
	return os.WriteFile(path, out.Bytes(), 0o666)
}

// implColors and implDashes tell the impls apart in the chart.
var implColors = map[string]color.Color{
	"lease":        color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"lease before": color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"limit":        color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"context":      color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"xsync":        color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

var implDashes = map[string][]vg.Length{
	"lease before": {vg.Points(4), vg.Points(3)},
	"limit":        {vg.Points(1), vg.Points(2)},
}

// chart draws one panel per op: throughput (millions of ops per second,
// over all cores) against cores, a line per impl.
func chart(path string, s samples, m machine) error {
	var shown []op
	for _, o := range ops {
		if s[o.name] != nil {
			shown = append(shown, o)
		}
	}
	const cols = 2
	rows := (len(shown) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	cores := s.coreCounts()
	for k, o := range shown {
		p := plot.New()
		p.Title.Text = o.title
		p.X.Label.Text = "cores"
		p.Y.Label.Text = "M ops/s"
		if o.unit == "ns/context" {
			p.Y.Label.Text = "M contexts/s"
		}
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = coreTicks(cores)
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		for _, impl := range o.impls {
			byCores := s[o.name][impl]
			if byCores == nil {
				continue
			}
			var xys plotter.XYs
			for _, c := range cores {
				if v, ok := s.median(o.name, impl, c); ok && v > 0 {
					xys = append(xys, plotter.XY{X: float64(c), Y: 1e3 / v})
				}
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, points.Color = implColors[impl], implColors[impl]
			line.Dashes = implDashes[impl]
			line.Width = vg.Points(1.5)
			p.Add(line, points)
			p.Legend.Add(impl, line, points)
		}
		plots[k/cols][k%cols] = p
	}
	w, h := 9*vg.Inch, vg.Length(rows)*3*vg.Inch+0.5*vg.Inch
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	title := draw.Crop(dc, 0, 0, 0, -0.3*vg.Inch)
	body := draw.Crop(dc, 0, 0, 0, -0.45*vg.Inch)
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 12), XAlign: draw.XCenter, Handler: plot.DefaultTextHandler}
	title.FillText(sty, vg.Point{X: w / 2, Y: h - 0.25*vg.Inch}, "Throughput against cores, one shared lease (higher is better): "+m.String())
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, body)
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// coreTicks marks the core counts on a log axis.
type coreTicks []int

func (t coreTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for _, c := range t {
		ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
	}
	return ticks
}
