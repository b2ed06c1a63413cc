package timeline

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/upgradekit/upgradekit/simulator"
	"github.com/upgradekit/upgradekit/strategy"
)

// Timeline geometry, in SVG pixels.
const (
	tlWidth      = 1200 // the whole picture
	tlLeft       = 250  // lane labels to the left of this
	tlLaneH      = 22   // one lane
	tlBarH       = 16
	tlCharW      = 6.6 // a 11px sans-serif character, for fitting labels
	tlMaxDetails = 60  // machine lanes beyond this: only the eventful ones
)

// Colours, one per kind of thing on the timeline.
const (
	colorInPlace  = "#4c9f70"
	colorReplace  = "#4a78c2"
	colorFailed   = "#d64545"
	colorRollback = "#e0a030"
	colorCrash    = "#8e44ad"
	colorRetried  = "#1d5e3a"
	colorBlocked  = "#8a8a8a"
)

// legendItem is one entry of the legend above the picture.
type legendItem struct {
	Style template.CSS // constants of this package only
	Text  string
}

var legend = []legendItem{
	{"background:" + colorInPlace, "in-place step"}, {"background:" + colorReplace, "replacement"},
	{"background:" + colorRollback, "rolled back (↶)"}, {"background:" + colorFailed, "failed (✗)"},
	{"background:" + colorCrash, "runner crash"}, {"border:2px solid " + colorRetried + ";width:8px;height:8px", "retried (×N)"},
}

// blocked says whether any event of res is Blocked (a StallStep among
// them).
func blocked(res *simulator.Result) bool {
	for _, e := range res.Events {
		if e.Outcome == "Blocked" {
			return true
		}
	}
	return false
}

type tlBar struct {
	X, Y, W, H    float64
	Color, Stroke string
	Title         string
	Label         string // drawn inside when it fits
	LabelX        float64
	LabelW        float64 // the label's width, enforced with textLength: fonts differ
}

type tlMark struct {
	X, Y          float64
	Symbol, Color string
	Title         string
}

type tlText struct {
	X, Y  float64
	Text  string
	Class string
}

type tlLine struct{ X1, Y1, X2, Y2 float64 }

// timeline is what the template draws.
type timeline struct {
	Legend         []legendItem
	Title, Summary string
	Width, Height  int
	Bars           []tlBar
	Marks          []tlMark
	Texts          []tlText
	Grid           []tlLine
}

// Option configures Write.
type Option func(*options)

type options struct {
	title, axis, summary string
	batch                string
	noBands              bool
}

// WithTitle replaces the page's title ("upgradekit rollout of <cluster>").
func WithTitle(title string) Option { return func(o *options) { o.title = title } }

// WithTimeAxis names the time axis ("virtual time").
func WithTimeAxis(label string) Option { return func(o *options) { o.axis = label } }

// WithSummary replaces the line under the title (machines, groups,
// batches, virtual time, failures, runner restarts).
func WithSummary(summary string) Option { return func(o *options) { o.summary = summary } }

// WithBatchName names what the results' batch numbers count in the
// machines' labels ("batch"): a preview numbers waves within each group.
func WithBatchName(name string) Option { return func(o *options) { o.batch = name } }

// WithoutBatchBands leaves out the background band per batch: for
// results whose groups run at the same time, where the bands overlap.
func WithoutBatchBands() Option { return func(o *options) { o.noBands = true } }

// ErrNoResult is Write's error for a nil Result or one without a Plan.
var ErrNoResult = errors.New("timeline: no result to draw")

// Write renders the rollout as one self-contained HTML page with
// an SVG, on a time axis:
//
//   - "Groups": one lane per group (the control plane, each machine
//     deployment), a bar per batch from its first start to its last end,
//     coloured by its worst outcome, with its machine count;
//   - "Machines": one lane per machine with a bar per step (its name
//     inside when it fits, all details in the tooltip), and marks for a
//     failure (✗), a rollback (↶), a runner crash (a purple rule across
//     the lane) and a retried step (outlined, ×N). Above tlMaxDetails machines only the machines where
//     something happened besides success get a lane (every one of those,
//     so nothing that went wrong is hidden), and the page says how many
//     are summarised by their group.
//
// Batches are background bands, labelled where the label fits.
//
// Events with the outcome Blocked (a machine the rollout would wait at,
// as a preview predicts) are grey, marked ‖.
func Write(w io.Writer, res *simulator.Result, opts ...Option) error {
	if w == nil || res == nil || res.Plan == nil {
		return ErrNoResult
	}
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	tl := build(res, o)
	return timelineTmpl.Execute(w, tl)
}

func build(res *simulator.Result, o options) timeline {
	span := res.End.Sub(res.Start)
	if span <= 0 {
		span = time.Second
	}
	plotW := float64(tlWidth - tlLeft - 10)
	x := func(t time.Time) float64 { return tlLeft + float64(t.Sub(res.Start))/float64(span)*plotW }
	var tl timeline
	batchName := "batch"
	if o.batch != "" {
		batchName = o.batch
	}
	tl.Title = "upgradekit rollout of " + res.Plan.Cluster
	if o.title != "" {
		tl.Title = o.title
	}
	tl.Width = tlWidth

	// Machines in plan order, their events, and what happened to each.
	var machines []strategy.PlannedMachine
	for _, pm := range res.Plan.Machines {
		if pm.Batch > 0 {
			machines = append(machines, pm)
		}
	}
	events := map[string][]simulator.Event{}
	stalls := map[string]simulator.Event{} // a failed machine's StallStep
	eventful := map[string]bool{}
	for _, e := range res.Events {
		if e.Step == simulator.StallStep {
			stalls[e.Machine] = e
			eventful[e.Machine] = true
			continue
		}
		events[e.Machine] = append(events[e.Machine], e)
		if e.Outcome == "Failed" || e.Outcome == "RolledBack" || e.Outcome == "Crashed" || e.Outcome == "Blocked" || e.Attempts > 1 {
			eventful[e.Machine] = true
		}
	}

	y := 40.0
	// The axis: ticks at a round interval, at most ~12.
	tick := niceTick(span)
	layout := "15:04"
	if span > 20*time.Hour {
		layout = "Mon 15:04"
	}
	top := y - 14
	var timeTicks, machineTicks []float64 // grid lines, drawn once the lanes' extent is known
	for t := res.Start.Truncate(tick); !t.After(res.End); t = t.Add(tick) {
		if t.Before(res.Start) {
			continue
		}
		tx := x(t)
		timeTicks = append(timeTicks, tx)
		if tx < tlWidth-30 {
			tl.Texts = append(tl.Texts, tlText{X: tx, Y: top - 4, Text: t.Format(layout), Class: "tick"})
		}
	}
	axis := "virtual time"
	if o.axis != "" {
		axis = o.axis
	}
	tl.Texts = append(tl.Texts, tlText{X: 4, Y: top - 4, Text: axis, Class: "tick"})

	// Groups.
	tl.Texts = append(tl.Texts, tlText{X: 4, Y: y + 12, Text: "Groups (a bar per " + batchName + ")", Class: "section"})
	y += tlLaneH
	var groups []string
	seen := map[string]bool{}
	for _, pm := range machines {
		g := groupOf(pm)
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		n := 0
		type agg struct {
			from, to time.Time
			count    int
			worst    string
			method   strategy.Method
		}
		per := map[int]*agg{}
		for _, pm := range machines {
			if groupOf(pm) != g {
				continue
			}
			n++
			for _, e := range events[pm.Machine] {
				a := per[e.Batch]
				if a == nil {
					a = &agg{from: e.Start, to: e.End, method: pm.Method}
					per[e.Batch] = a
				}
				if e.Start.Before(a.from) {
					a.from = e.Start
				}
				if e.End.After(a.to) {
					a.to = e.End
				}
				a.worst = worse(a.worst, e.Outcome)
			}
			if a := per[pm.Batch]; a != nil {
				a.count++
			}
		}
		tl.Texts = append(tl.Texts, tlText{X: 4, Y: y + 12, Text: fmt.Sprintf("%s (%s)", g, machinesText(n))})
		// The group stalls from a failure on (simulator.FailurePolicyStall): a grey
		// bar under its batches, to the end.
		for _, pm := range machines {
			if e, ok := stalls[pm.Machine]; ok && groupOf(pm) == g {
				tl.Bars = append(tl.Bars, tlBar{X: x(e.Start), Y: y, W: max(x(e.End)-x(e.Start), 2), H: tlBarH, Color: colorBlocked,
					Title: fmt.Sprintf("%s stalled at %s: %s", g, pm.Machine, Describe(e))})
			}
		}
		var bs []int
		for b := range per {
			bs = append(bs, b)
		}
		sort.Ints(bs)
		for _, b := range bs {
			a := per[b]
			bar := tlBar{X: x(a.from), Y: y, W: max(x(a.to)-x(a.from), 2), H: tlBarH, Color: outcomeColor(a.worst, a.method),
				Title: fmt.Sprintf("%s %s %d: %s, %s-%s, %s", g, batchName, b, machinesText(a.count), a.from.Format("15:04:05"), a.to.Format("15:04:05"), worstText(a.worst))}
			fitLabel(&bar, machinesText(a.count))
			tl.Bars = append(tl.Bars, bar)
		}
		y += tlLaneH
	}

	// Machines.
	shown := machines
	hidden := 0
	if len(machines) > tlMaxDetails {
		shown = nil
		for _, pm := range machines {
			if eventful[pm.Machine] {
				shown = append(shown, pm)
			}
		}
		hidden = len(machines) - len(shown)
	}
	groupsEnd := y
	// The machines' lanes are zoomed: each starts at its machine's first
	// event, on one scale fitted to the longest, so steps are wide enough
	// to read (the groups above say when).
	first := map[string]time.Time{}
	var longest time.Duration
	for _, pm := range shown {
		evs := events[pm.Machine]
		if len(evs) == 0 {
			continue
		}
		from, to := evs[0].Start, evs[0].End
		for _, e := range evs {
			if e.Start.Before(from) {
				from = e.Start
			}
			if e.End.After(to) {
				to = e.End
			}
		}
		first[pm.Machine] = from
		longest = max(longest, to.Sub(from))
	}
	if longest <= 0 {
		longest = time.Second
	}
	mx := func(m string, t time.Time) float64 {
		return tlLeft + float64(t.Sub(first[m]))/float64(longest)*plotW
	}
	y += 8
	head := "Machines (a bar per step)"
	if hidden > 0 {
		head = fmt.Sprintf("Machines where something went wrong or was retried: %d of %d (the other %d succeeded at once, see their group)", len(shown), len(machines), hidden)
	}
	tl.Texts = append(tl.Texts, tlText{X: 4, Y: y + 12, Text: head, Class: "section"})
	y += tlLaneH + 14
	mtick := niceTick(longest)
	machineAxisTop := y - 6
	tl.Texts = append(tl.Texts, tlText{X: 4, Y: y - 8, Text: "time since the machine's first step", Class: "tick"})
	for d := time.Duration(0); d <= longest; d += mtick {
		tx := tlLeft + float64(d)/float64(longest)*plotW
		machineTicks = append(machineTicks, tx)
		if tx < tlWidth-30 {
			tl.Texts = append(tl.Texts, tlText{X: tx, Y: y - 8, Text: fmt.Sprintf("+%dm", int(d.Minutes())), Class: "tick"})
		}
	}
	for _, pm := range shown {
		x := func(t time.Time) float64 { return mx(pm.Machine, t) }
		tl.Texts = append(tl.Texts, tlText{X: 4, Y: y + 12, Text: fmt.Sprintf("%s (%s, %s %d)", pm.Machine, pm.Method, batchName, pm.Batch)})
		for _, e := range events[pm.Machine] {
			title := fmt.Sprintf("%s: %s (%s) %s-%s %s", e.Machine, e.Step, e.Method, e.Start.Format("15:04:05"), e.End.Format("15:04:05"), Describe(e))
			switch {
			case e.Outcome == "Crashed":
				// A bar across the lane, not a symbol: the step that
				// resumes starts right there, with its label.
				tl.Bars = append(tl.Bars, tlBar{X: x(e.Start) - 1, Y: y - 2, W: 3, H: tlBarH + 4, Color: colorCrash, Title: title})
				continue
			case e.Outcome == "RolledBack" && !e.End.After(e.Start):
				tl.Marks = append(tl.Marks, tlMark{X: x(e.Start), Y: y + 12, Symbol: "↶", Color: colorRollback, Title: title})
				continue
			}
			bar := tlBar{X: x(e.Start), Y: y, W: max(x(e.End)-x(e.Start), 2), H: tlBarH, Color: outcomeColor(e.Outcome, e.Method), Title: title}
			label := e.Step
			if e.Attempts > 1 {
				bar.Stroke = colorRetried
				label = fmt.Sprintf("%s ×%d", e.Step, e.Attempts)
			}
			fitLabel(&bar, label)
			tl.Bars = append(tl.Bars, bar)
			switch e.Outcome {
			case "Failed":
				tl.Marks = append(tl.Marks, tlMark{X: bar.X + bar.W + 1, Y: y + 12, Symbol: "✗", Color: colorFailed, Title: title})
			case "Blocked":
				tl.Marks = append(tl.Marks, tlMark{X: bar.X + bar.W + 1, Y: y + 12, Symbol: "‖", Color: colorBlocked, Title: title})
			}
		}
		if e, ok := stalls[pm.Machine]; ok {
			// Blocked to the end of the run, which lies beyond the lane's
			// zoom: a thin grey bar from the failure to the right edge.
			if from := x(e.Start) + 2; from < tlLeft+plotW {
				tl.Bars = append(tl.Bars, tlBar{X: from, Y: y + tlBarH/2 - 2, W: tlLeft + plotW - from, H: 4, Color: colorBlocked,
					Title: fmt.Sprintf("%s: %s", e.Machine, Describe(e))})
			}
		}
		y += tlLaneH
	}
	height := y + 10
	for _, tx := range timeTicks { // the time axis: through the groups
		tl.Grid = append(tl.Grid, tlLine{X1: tx, Y1: top, X2: tx, Y2: groupsEnd})
	}
	for _, tx := range machineTicks { // the machines' axis: through their lanes
		tl.Grid = append(tl.Grid, tlLine{X1: tx, Y1: machineAxisTop, X2: tx, Y2: height})
	}

	// Batch bands behind the groups, labelled where the label fits.
	type window struct{ from, to time.Time }
	batches := map[int]*window{}
	for _, e := range res.Events {
		b := batches[e.Batch]
		if b == nil {
			b = &window{e.Start, e.End}
			batches[e.Batch] = b
		}
		if e.Start.Before(b.from) {
			b.from = e.Start
		}
		if e.End.After(b.to) {
			b.to = e.End
		}
	}
	var bands []tlBar
	var bandLabels []tlText
	lastLabelEnd := 0.0
	for _, b := range slices.Sorted(maps.Keys(batches)) {
		s := batches[b]
		bx, bw := x(s.from), max(x(s.to)-x(s.from), 1)
		bands = append(bands, tlBar{X: bx, Y: 40, W: bw, H: groupsEnd - 40, Color: "#f2f2f2", Title: fmt.Sprintf("batch %d: %s-%s", b, s.from.Format("15:04:05"), s.to.Format("15:04:05"))})
		label := fmt.Sprintf("batch %d", b)
		if lw := float64(len(label)) * tlCharW; bw >= lw && bx >= lastLabelEnd {
			bandLabels = append(bandLabels, tlText{X: bx + 1, Y: 50, Text: label, Class: "band"})
			lastLabelEnd = bx + lw + 4
		}
	}
	if !o.noBands {
		tl.Bars = append(bands, tl.Bars...) // drawn first: under everything
		tl.Texts = append(tl.Texts, bandLabels...)
	}
	tl.Height = int(height)
	tl.Summary = fmt.Sprintf("%d machines in %d groups, %d batches, %s of virtual time, %d failed, %d runner restarts",
		len(machines), len(groups), len(res.Plan.Batches), span.Round(time.Second), len(res.Failed), res.Restarts)
	if o.summary != "" {
		tl.Summary = o.summary
	}
	tl.Legend = legend
	if blocked(res) {
		tl.Legend = append(slices.Clone(legend), legendItem{Style: "background:" + colorBlocked, Text: "blocked (‖)"})
	}
	return tl
}

// fitLabel puts label inside bar when it fits, cut short with "…" when at
// least three characters of it do, and otherwise leaves it to the tooltip.
// The label is fitted by an estimated character width, and drawn with that
// width as its textLength: a browser whose sans-serif font is wider
// squeezes it rather than drawing it over the bar's end (and a failure
// mark just after).
func fitLabel(bar *tlBar, label string) {
	r := []rune(label)
	fits := int((bar.W - 4) / tlCharW)
	switch {
	case fits >= len(r):
	case fits >= 4:
		r = append(r[:fits-1], '…')
	default:
		return
	}
	bar.Label, bar.LabelX = string(r), bar.X+2
	bar.LabelW = min(float64(len(r))*tlCharW, bar.W-4)
}

func groupOf(pm strategy.PlannedMachine) string {
	if pm.Group == "" {
		return "control-plane"
	}
	return pm.Group
}

// worse keeps the worse of two outcomes: Failed, then RolledBack, then
// Crashed, then anything else.
func worse(a, b string) string {
	rank := func(o string) int {
		switch o {
		case "Failed":
			return 3
		case "RolledBack":
			return 2
		case "Crashed", "Blocked":
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

func worstText(o string) string {
	switch o {
	case "Failed", "RolledBack", "Crashed", "Blocked":
		return "worst: " + o
	}
	return "all succeeded"
}

func outcomeColor(outcome string, m strategy.Method) string {
	switch outcome {
	case "Failed":
		return colorFailed
	case "Blocked":
		return colorBlocked
	case "RolledBack":
		return colorRollback
	case "Crashed":
		return colorCrash
	}
	if m != strategy.MethodInPlace {
		return colorReplace
	}
	return colorInPlace
}

// niceTick is the round interval that puts at most about 12 ticks on span.
func niceTick(span time.Duration) time.Duration {
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour} {
		if span/d <= 12 {
			return d
		}
	}
	return 48 * time.Hour
}

var timelineTmpl = template.Must(template.New("timeline").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:sans-serif;margin:16px}text{font-size:11px;font-family:sans-serif}text.section{font-weight:bold}text.tick,text.band{fill:#666}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>{{.Summary}}</p>
<p class="legend">{{range .Legend}}<span style="{{.Style}}"></span>{{.Text}}{{end}}</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="rollout timeline">
{{range .Grid}}<line x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}" stroke="#ddd"/>
{{end}}{{range .Bars}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Color}}"{{if .Stroke}} stroke="{{.Stroke}}" stroke-width="2"{{end}}><title>{{.Title}}</title></rect>{{if .Label}}<text x="{{.LabelX}}" y="{{.Y}}" dy="12" fill="#fff" textLength="{{.LabelW}}" lengthAdjust="spacingAndGlyphs">{{.Label}}</text>{{end}}
{{end}}{{range .Marks}}<text x="{{.X}}" y="{{.Y}}" fill="{{.Color}}" class="mark">{{.Symbol}}<title>{{.Title}}</title></text>
{{end}}{{range .Texts}}<text x="{{.X}}" y="{{.Y}}"{{if .Class}} class="{{.Class}}"{{end}}>{{.Text}}</text>
{{end}}</svg>
</body></html>
`))

// Describe says how an event ended, in a few words: its outcome, the
// attempts when it was retried, what a runner crash means, since when a
// failed machine stalls its group (simulator.StallStep).
func Describe(e simulator.Event) string {
	switch {
	case e.Outcome == "Crashed":
		return "Crashed: the upgrader died; a new one resumes from the journal"
	case e.Step == simulator.StallStep:
		return fmt.Sprintf("Blocked since %s: its update failed; Cluster API keeps the Machine Updating and retries it, so it stays unavailable", e.Start.Format("15:04:05"))
	case e.Attempts > 1:
		return fmt.Sprintf("%s after %d attempts", e.Outcome, e.Attempts)
	}
	return e.Outcome
}

// machinesText is "1 machine", "n machines".
func machinesText(n int) string {
	if n == 1 {
		return "1 machine"
	}
	return fmt.Sprintf("%d machines", n)
}
