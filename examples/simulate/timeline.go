package main

import (
	"fmt"
	"html/template"
	"io"
	"sort"
	"time"

	"github.com/upgradekit/upgradekit/fake"
)

// writeTimeline renders the rollout as one self-contained HTML page with
// an SVG: one lane per machine, one bar per step, failures in red and
// marked, batches as background bands.
func writeTimeline(w io.Writer, res *fake.Result) error {
	const laneH, left, width = 22, 190, 1100
	span := res.End.Sub(res.Start)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 { return left + float64(t.Sub(res.Start))/float64(span)*(width-left-10) }

	var lanes []string
	laneOf := map[string]int{}
	for _, pm := range res.Plan.Machines {
		if _, ok := laneOf[pm.Machine]; !ok {
			laneOf[pm.Machine] = len(lanes)
			lanes = append(lanes, pm.Machine)
		}
	}
	type bar struct {
		X, Y, W      float64
		Color, Title string
		Failed       bool
		MarkX, MarkY float64
	}
	type lane struct {
		Name string
		Y    float64
		Note string
	}
	type band struct {
		X, W  float64
		Label string
	}
	var bars []bar
	batchStart, batchEnd := map[int]time.Time{}, map[int]time.Time{}
	for _, e := range res.Events {
		y := float64(laneOf[e.Machine]*laneH + 40)
		color := "#4c9f70"
		switch {
		case e.Outcome == "Failed":
			color = "#d64545"
		case e.Outcome == "RolledBack":
			color = "#e0a030"
		case e.Method != "InPlace":
			color = "#4a78c2"
		}
		w := x(e.End) - x(e.Start)
		if w < 2 {
			w = 2
		}
		b := bar{X: x(e.Start), Y: y, W: w, Color: color, Failed: e.Outcome == "Failed",
			Title: fmt.Sprintf("%s: %s (%s) %s-%s %s", e.Machine, e.Step, e.Method, e.Start.Format("15:04:05"), e.End.Format("15:04:05"), e.Outcome)}
		b.MarkX, b.MarkY = b.X+b.W, y+4
		bars = append(bars, b)
		if s, ok := batchStart[e.Batch]; !ok || e.Start.Before(s) {
			batchStart[e.Batch] = e.Start
		}
		if e.End.After(batchEnd[e.Batch]) {
			batchEnd[e.Batch] = e.End
		}
	}
	var bands []band
	var idx []int
	for b := range batchStart {
		idx = append(idx, b)
	}
	sort.Ints(idx)
	for _, b := range idx {
		bands = append(bands, band{X: x(batchStart[b]), W: x(batchEnd[b]) - x(batchStart[b]), Label: fmt.Sprintf("batch %d", b)})
	}
	var ls []lane
	for i, name := range lanes {
		note := ""
		if pm, ok := res.Plan.Machine(name); ok {
			note = string(pm.Method)
		}
		ls = append(ls, lane{Name: name, Y: float64(i*laneH + 40), Note: note})
	}
	data := struct {
		Title         string
		Width, Height int
		Lanes         []lane
		Bars          []bar
		Bands         []band
		Summary       string
	}{
		Title: "upgradekit rollout of " + res.Plan.Cluster, Width: width, Height: len(lanes)*laneH + 70,
		Lanes: ls, Bars: bars, Bands: bands,
		Summary: fmt.Sprintf("%d machines, %d batches, %s of virtual time, %d failed", len(lanes), len(res.Plan.Batches), span.Round(time.Second), len(res.Failed)),
	}
	return timelineTmpl.Execute(w, data)
}

var timelineTmpl = template.Must(template.New("timeline").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:sans-serif;margin:16px}text{font-size:12px}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>{{.Summary}}</p>
<p class="legend"><span style="background:#4c9f70"></span>in-place step<span style="background:#4a78c2"></span>replacement<span style="background:#e0a030"></span>rolled back<span style="background:#d64545"></span>failed</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="rollout timeline">
{{range .Bands}}<rect x="{{.X}}" y="18" width="{{.W}}" height="{{$.Height}}" fill="#f2f2f2"/><text x="{{.X}}" y="14">{{.Label}}</text>
{{end}}{{range .Lanes}}<text x="4" y="{{.Y}}" dy="12">{{.Name}} ({{.Note}})</text>
{{end}}{{range .Bars}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="16" fill="{{.Color}}"><title>{{.Title}}</title></rect>{{if .Failed}}<text x="{{.MarkX}}" y="{{.MarkY}}" dy="10" fill="#d64545">✗</text>{{end}}
{{end}}</svg>
</body></html>
`))
