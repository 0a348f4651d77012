// Command benchreport reads the output of the bench module's benchmarks,
// prints for each benchmark the lease's median against its peers' with the
// ratio and the project's goal, and draws the chart of docs/benchmarks.svg.
//
// Usage:
//
//	benchreport [-svg file] bench.txt...
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
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// A goal is a target for one benchmark against one peer: the lease's median
// over the peer's, in unit, at most ratio (0: none set, the figure is only
// stated); and at most allocs allocations (-1: none set) and bytes B/op (0:
// none set) per op. With asPeer, the lease may allocate no more, in count and
// bytes, than the peer; with halfPeer, at most half the peer's count.
type goal struct {
	name     string
	unit     string
	peer     string
	ratio    float64
	allocs   float64
	bytes    float64
	asPeer   bool
	halfPeer bool
}

var goals = []goal{
	{name: "ErrLive", unit: "ns/op", peer: "context", ratio: 0.35, allocs: 0},
	{name: "ErrLost", unit: "ns/op", peer: "context", ratio: 0.1, allocs: 0},
	{name: "DoneWarm", unit: "ns/op", peer: "context", ratio: 1.0, allocs: 0},
	{name: "Lifecycle", unit: "ns/op", peer: "context", ratio: 0.35, allocs: 1, bytes: 64},
	{name: "Loss", unit: "ns/op", peer: "context", ratio: 0.5, allocs: 2},
	{name: "Loss", unit: "ns/op", peer: "handrolled", ratio: 1.0, allocs: 2},
	{name: "AfterLoss", unit: "ns/op", peer: "context", ratio: 0.5, allocs: 2},
	{name: "Context", unit: "ns/op", peer: "context", ratio: 1.0, allocs: -1},
	{name: "Context", unit: "ns/op", peer: "context.child", ratio: 1.0, allocs: -1, asPeer: true},
	{name: "ContextRequest", unit: "ns/op", peer: "context", ratio: 0.5, allocs: -1, halfPeer: true},
	{name: "AnyRelease", unit: "ns/op", peer: "context", ratio: 0.5, allocs: -1},
	{name: "AnyScale", unit: "ns/source", peer: "context", allocs: -1},
	{name: "Wake", unit: "ns/op", peer: "context", ratio: 1.0, allocs: -1},
	{name: "Memory", unit: "B/lease", peer: "context", ratio: 0.7, allocs: -1},
}

// samples maps benchmark, then impl, then unit to the values of every run.
type samples map[string]map[string]map[string][]float64

func main() {
	svg := flag.String("svg", "", "write the chart to this SVG file")
	flag.Parse()
	if flag.NArg() == 0 {
		log.Fatal("usage: benchreport [-svg file] bench.txt...")
	}
	s, err := read(flag.Args())
	if err != nil {
		log.Fatal(err)
	}
	report(os.Stdout, s)
	if *svg != "" {
		if err := chart(*svg, s); err != nil {
			log.Fatal(err)
		}
	}
}

func read(files []string) (samples, error) {
	s := make(samples)
	fs := benchfmt.Files{Paths: files}
	for fs.Scan() {
		res, ok := fs.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error or a unit line
		}
		base, parts := res.Name.Parts()
		impl := ""
		for _, p := range parts {
			if v, ok := strings.CutPrefix(string(p), "/impl="); ok {
				impl = v
			}
		}
		if impl == "" {
			continue
		}
		name := string(base)
		if s[name] == nil {
			s[name] = make(map[string]map[string][]float64)
		}
		if s[name][impl] == nil {
			s[name][impl] = make(map[string][]float64)
		}
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			s[name][impl][unit] = append(s[name][impl][unit], val)
		}
	}
	return s, fs.Err()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	sort.Float64s(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

func (s samples) median(name, impl, unit string) (float64, bool) {
	xs := s[name][impl][unit]
	return median(xs), len(xs) > 0
}

// report prints one Markdown row per goal.
func report(w io.Writer, s samples) {
	fmt.Fprintln(w, "| benchmark | peer | unit | lease | peer | handrolled | lease/peer | goal | met | lease allocs/op, B/op | peer allocs/op, B/op |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---|---|---|")
	for _, g := range goals {
		lease, ok := s.median(g.name, "lease", g.unit)
		peer, okPeer := s.median(g.name, g.peer, g.unit)
		if !ok || !okPeer {
			fmt.Fprintf(w, "| %s | %s | %s | (no data) |\n", g.name, g.peer, g.unit)
			continue
		}
		hand := "–"
		if v, ok := s.median(g.name, "handrolled", g.unit); ok {
			hand = num(v)
		}
		ratio := lease / peer
		goalText, met := "–", "stated"
		if g.ratio > 0 {
			goalText, met = fmt.Sprintf("≤ %g", g.ratio), "yes"
			if ratio > g.ratio {
				met = fmt.Sprintf("no, by %.2f×", ratio/g.ratio)
			}
		}
		allocs, _ := s.median(g.name, "lease", "allocs/op")
		bytes, _ := s.median(g.name, "lease", "B/op")
		peerAllocs, _ := s.median(g.name, g.peer, "allocs/op")
		peerBytes, _ := s.median(g.name, g.peer, "B/op")
		mem := fmt.Sprintf("%.0f, %.0f", allocs, bytes)
		if g.allocs >= 0 && allocs > g.allocs {
			mem += fmt.Sprintf(" (goal ≤ %g allocs: missed)", g.allocs)
		}
		if g.bytes > 0 && bytes > g.bytes {
			mem += fmt.Sprintf(" (goal ≤ %g B: missed)", g.bytes)
		}
		if g.asPeer && (allocs > peerAllocs || bytes > peerBytes) {
			mem += " (goal: no more than the peer: missed)"
		}
		if g.halfPeer && allocs > peerAllocs/2 {
			mem += fmt.Sprintf(" (goal ≤ %g allocs: missed)", peerAllocs/2)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.3f | %s | %s | %s | %.0f, %.0f |\n",
			g.name, g.peer, g.unit, num(lease), num(peer), hand, ratio, goalText, met, mem, peerAllocs, peerBytes)
	}
	// ErrLost has a fourth peer, the call that returns the cause as Err does.
	if lease, ok := s.median("ErrLost", "lease", "ns/op"); ok {
		if cause, ok := s.median("ErrLost", "context.Cause", "ns/op"); ok {
			fmt.Fprintf(w, "\nErrLost against context.Cause: %s / %s ns/op = %.3f\n", num(lease), num(cause), lease/cause)
		}
	}
}

func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

var (
	leaseColor   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	contextColor = color.RGBA{R: 0xbb, G: 0xbb, B: 0xbb, A: 0xff}
)

// chart draws one small bar chart per goal, lease beside its peer, each on
// its own linear scale, since the costs span six orders of magnitude.
func chart(path string, s samples) error {
	const cols = 3
	rows := (len(goals) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, g := range goals {
		p := plot.New()
		unit := g.unit
		scale, label := 1.0, unit
		lease, ok1 := s.median(g.name, "lease", unit)
		ctx, ok2 := s.median(g.name, g.peer, unit)
		if !ok1 || !ok2 {
			continue
		}
		if max(lease, ctx) >= 1e6 {
			scale, label = 1e6, "ms/op"
		}
		p.Title.Text = fmt.Sprintf("%s: %.3f (goal ≤ %g)", g.name, lease/ctx, g.ratio)
		if g.ratio == 0 {
			p.Title.Text = fmt.Sprintf("%s: %.3f (no goal)", g.name, lease/ctx)
		}
		p.Title.TextStyle.Font.Size = 11
		p.Y.Label.Text = label
		grid := plotter.NewGrid()
		grid.Vertical.Color = nil
		p.Add(grid)
		p.X.Min, p.X.Max = -0.7, 1.7
		p.Y.Min, p.Y.Max = 0, 1.15*max(lease, ctx, g.ratio*ctx)/scale
		// The goal: the most the lease may cost, at the goal's ratio to
		// context.
		if g.ratio > 0 {
			top := g.ratio * ctx / scale
			goalLine, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: top}, {X: 1.5, Y: top}})
			if err != nil {
				return fmt.Errorf("%s: %v", g.name, err)
			}
			goalLine.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
			goalLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(goalLine)
		}
		for j, v := range []struct {
			val float64
			c   color.Color
		}{{lease, leaseColor}, {ctx, contextColor}} {
			bar, err := plotter.NewBarChart(plotter.Values{v.val / scale}, vg.Points(28))
			if err != nil {
				return fmt.Errorf("%s: %v", g.name, err)
			}
			bar.Color = v.c
			bar.LineStyle.Width = 0
			bar.XMin = float64(j)
			p.Add(bar)
		}
		p.NominalX("lease", g.peer)
		plots[i/cols][i%cols] = p
	}

	const w, h = 9 * vg.Inch, 12 * vg.Inch
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	title := draw.Crop(dc, 0, 0, 0, -0.3*vg.Inch)
	body := draw.Crop(dc, 0, 0, 0.3*vg.Inch, -0.35*vg.Inch)
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 13), XAlign: draw.XCenter, Handler: plot.DefaultTextHandler}
	title.FillText(sty, vg.Point{X: w / 2, Y: h - 0.25*vg.Inch}, "Median per op, lease beside its peer (lower is better); dashed: the goal")
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, body)
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
