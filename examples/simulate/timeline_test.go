package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// svgDoc is what the structural checks read of the timeline's SVG.
type svgDoc struct {
	Width  float64 `xml:"width,attr"`
	Height float64 `xml:"height,attr"`
	Rects  []struct {
		X, Y, W, H float64
		XS         string `xml:"x,attr"`
		YS         string `xml:"y,attr"`
		WS         string `xml:"width,attr"`
		HS         string `xml:"height,attr"`
		Fill       string `xml:"fill,attr"`
		Stroke     string `xml:"stroke,attr"`
		Title      string `xml:"title"`
	} `xml:"rect"`
	Texts []struct {
		XS    string `xml:"x,attr"`
		YS    string `xml:"y,attr"`
		Class string `xml:"class,attr"`
		Body  string `xml:",chardata"`
	} `xml:"text"`
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "%q is a number", s)
	return f
}

// renderDemo runs the demo with args and a timeline, and returns the page.
func renderDemo(t *testing.T, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rollout.html")
	_ = run(context.Background(), append([]string{"-progress-bar=false", "-timeline", path}, args...), &bytes.Buffer{}, &bytes.Buffer{})
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(raw)
}

func parseSVG(t *testing.T, page string) svgDoc {
	t.Helper()
	start, end := strings.Index(page, "<svg"), strings.Index(page, "</svg>")
	require.True(t, start > 0 && end > start, "the page holds an SVG")
	var d svgDoc
	require.NoError(t, xml.Unmarshal([]byte(page[start:end+len("</svg>")]), &d), "the SVG is well-formed XML")
	for i := range d.Rects {
		r := &d.Rects[i]
		r.X, r.Y, r.W, r.H = num(t, r.XS), num(t, r.YS), num(t, r.WS), num(t, r.HS)
	}
	return d
}

// The two scenarios of the closing figures: the default demo with a
// crash, retries and a failure that stalls md-0 as Cluster API would (13
// machines), and 1,000 machines carrying on past failures (-on-failure
// continue), so that all of them are drawn.
var (
	demo13   = []string{"-fail", "demo-md-0-1/kubeadm-upgrade=9", "-crash", "demo-md-0-0/kubelet"}
	demo1000 = []string{"-control-planes", "3", "-workers", "md-0=250,md-1=250,md-2=250,md-3=247", "-new-image", "md-3",
		"-fail", "demo-md-0-17/kubeadm-upgrade=9", "-crash", "demo-md-2-100/kubelet", "-flaky", "0.002", "-seed", "7", "-on-failure", "continue"}
)

// TestTimelineStructure checks the timeline without a browser: a time
// axis, a lane per group with its machine count, a lane per machine at 13
// machines and only the eventful ones at 1,000 (all of them), failure,
// rollback, crash and retry marks where they happened, everything inside
// the picture, and no two labels on top of each other.
func TestTimelineStructure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		lanes     []string // machine lanes that must be there
		noLanes   []string // and must not
		groups    []string
		maxHeight float64
	}{
		{name: "13 machines", args: demo13,
			lanes:  []string{"demo-control-plane-0 (", "demo-md-0-0 (", "demo-md-0-1 (", "demo-md-0-2 (", "demo-md-1-4 ("},
			groups: []string{"control-plane (3 machines)", "md-0 (5 machines)", "md-1 (5 machines)"}, maxHeight: 600},
		{name: "1000 machines", args: demo1000,
			lanes:   []string{"demo-md-0-17 (", "demo-md-2-100 ("},
			noLanes: []string{"demo-md-0-16 (", "demo-md-3-0 ("},
			groups:  []string{"control-plane (3 machines)", "md-0 (250 machines)", "md-3 (247 machines)"}, maxHeight: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := renderDemo(t, tc.args...)
			d := parseSVG(t, page)
			require.LessOrEqual(t, d.Height, tc.maxHeight, "the picture stays small")
			var labels []string
			for _, x := range d.Texts {
				labels = append(labels, x.Body)
			}
			all := strings.Join(labels, "\n")
			for _, l := range tc.lanes {
				require.Contains(t, all, l, "a lane for %s", l)
			}
			for _, l := range tc.noLanes {
				require.NotContains(t, all, l)
			}
			for _, g := range tc.groups {
				require.Contains(t, all, g)
			}
			for _, mark := range []string{"✗", "↶"} {
				require.Contains(t, labels, mark, "a %s mark", mark)
			}
			retried, crashed := false, false
			for _, r := range d.Rects {
				require.GreaterOrEqual(t, r.X, 0.0)
				require.LessOrEqual(t, r.X+r.W, d.Width+0.5, "%s is inside the picture", r.Title)
				require.LessOrEqual(t, r.Y+r.H, d.Height+0.5)
				retried = retried || (r.Stroke != "" && strings.Contains(r.Title, "attempts"))
				crashed = crashed || (r.Fill == "#8e44ad" /* the runner crash colour */ && strings.Contains(r.Title, "runner-restart"))
			}
			require.True(t, retried, "a retried step is outlined")
			require.True(t, crashed, "a runner crash is marked")

			// Ticks: at least three, readable, in order.
			var ticks []float64
			tickRe := regexp.MustCompile(`^(\w{3} )?\d\d:\d\d$`)
			for _, x := range d.Texts {
				if x.Class == "tick" && tickRe.MatchString(x.Body) {
					ticks = append(ticks, num(t, x.XS))
				}
			}
			require.GreaterOrEqual(t, len(ticks), 3, "a time axis")
			for i := 1; i < len(ticks); i++ {
				require.Greater(t, ticks[i]-ticks[i-1], 9*6.6 /* characters of 11px sans-serif */, "tick labels do not touch")
			}
			// No two texts start within a character's width and a line
			// of each other (labels drawn over labels).
			type at struct{ x, y float64 }
			var pos []at
			for _, x := range d.Texts {
				pos = append(pos, at{num(t, x.XS), num(t, x.YS)})
			}
			for i := range pos {
				for j := i + 1; j < len(pos); j++ {
					dx, dy := pos[i].x-pos[j].x, pos[i].y-pos[j].y
					require.False(t, dx*dx < 4 && dy*dy < 64, "texts %q and %q are drawn on each other", d.Texts[i].Body, d.Texts[j].Body)
				}
			}
		})
	}
}

// TestTimelineInABrowser renders both timelines in headless Chromium and
// measures, with the browser's own layout (getBBox), that no two texts
// overlap and that the drawing fits the SVG. It needs Debian's chromium
// package: CI installs it (UPGRADEKIT_REQUIRE_BROWSER=1 makes its absence
// a failure); elsewhere the test is skipped without it.
func TestTimelineInABrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("UPGRADEKIT_REQUIRE_BROWSER") != "" {
			t.Fatalf("UPGRADEKIT_REQUIRE_BROWSER is set and chromium is not installed: %v", err)
		}
		t.Skip("no chromium (apt-get install chromium)")
	}
	const check = `<script>
addEventListener('load', () => {
  const svg = document.querySelector('svg');
  const texts = [...svg.querySelectorAll('text')].filter(t => t.textContent.trim() !== '');
  const boxes = texts.map(t => t.getBBox());
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    const w = Math.min(a.x + a.width, b.x + b.width) - Math.max(a.x, b.x);
    const h = Math.min(a.y + a.height, b.y + b.height) - Math.max(a.y, b.y);
    if (w > 1 && h > 2) overlaps.push(texts[i].textContent + ' / ' + texts[j].textContent);
  }
  const all = svg.getBBox();
  const fits = all.x >= -1 && all.y >= -1 && all.x + all.width <= svg.width.baseVal.value + 1 && all.y + all.height <= svg.height.baseVal.value + 1;
  document.body.setAttribute('data-check', JSON.stringify({texts: texts.length, overlaps: overlaps.slice(0, 5), n: overlaps.length, fits}));
});
</script></body>`
	for name, args := range map[string][]string{"13 machines": demo13, "1000 machines": demo1000} {
		t.Run(name, func(t *testing.T) {
			page := strings.Replace(renderDemo(t, args...), "</body>", check, 1)
			path := filepath.Join(t.TempDir(), "page.html")
			require.NoError(t, os.WriteFile(path, []byte(page), 0o644))
			var dom []byte
			for attempt := 0; attempt < 3; attempt++ { // Chromium in a container sometimes dies at start
				cmd := exec.CommandContext(t.Context(), chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
					"--virtual-time-budget=5000", "--dump-dom", "file://"+path)
				if dom, err = cmd.Output(); err == nil {
					break
				}
			}
			require.NoError(t, err, "chromium --dump-dom")
			m := regexp.MustCompile(`data-check="([^"]*)"`).FindSubmatch(dom)
			require.NotNil(t, m, "the page's check ran")
			result := strings.ReplaceAll(string(m[1]), "&quot;", `"`)
			t.Log(result)
			require.Contains(t, result, `"n":0`, "no two texts overlap")
			require.Contains(t, result, `"fits":true`, "the drawing fits the SVG")
		})
	}
}
