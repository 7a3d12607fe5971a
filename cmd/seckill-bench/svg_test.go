package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// parseSVG decodes the whole document, failing on any XML error, and counts its elements.
func parseSVG(t *testing.T, doc []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	elems := map[string]int{}
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v\n%s", err, doc)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", e.Name)
				}
			}
			depth++
			elems[e.Name.Local]++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 || depth != 0 {
		t.Fatalf("%d root elements, depth %d at the end", roots, depth)
	}
	return elems
}

func TestChartIsValidSVG(t *testing.T) {
	c := chartData{
		Title:  `seckill <bench> & "quotes" 'too'`,
		Window: 500 * time.Millisecond,
		Marks:  []mark{{0, "sale / seckill"}, {2 * time.Second, "soak / <respond>"}},
	}
	for i := 0; i < 10; i++ {
		p := chartPoint{Requests: int64(1000 + i), P50: time.Duration(i+1) * time.Millisecond, P99: time.Duration(i+5) * time.Millisecond, Max: time.Duration(i+50) * time.Millisecond}
		if i == 4 {
			p = chartPoint{} // a gap: a window without requests splits the line
		}
		c.Points[gateway] = append(c.Points[gateway], p)
		if i%2 == 0 {
			c.Points[baseline] = append(c.Points[baseline], chartPoint{Requests: 2000, P50: 300 * time.Microsecond, P99: 2 * time.Millisecond, Max: 3 * time.Millisecond})
		} else {
			c.Points[baseline] = append(c.Points[baseline], chartPoint{})
		}
	}
	var b bytes.Buffer
	renderChart(&b, c)
	elems := parseSVG(t, b.Bytes())
	// seckill: 2 segments × 4 lines; respond: 5 lone windows × 4 lines.
	if got, want := elems["polyline"], 2*4+5*4; got != want {
		t.Errorf("%d polylines, want %d", got, want)
	}
	if !strings.Contains(b.String(), "seckill &lt;bench&gt; &amp;") {
		t.Error("the title is not escaped")
	}
	if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
		t.Errorf("chart has non-numbers:\n%s", b.String())
	}
}

func TestChartWithoutDataIsValidSVG(t *testing.T) {
	var b bytes.Buffer
	renderChart(&b, chartData{Title: "empty", Window: time.Second})
	elems := parseSVG(t, b.Bytes())
	if elems["polyline"] != 0 {
		t.Errorf("%d polylines in an empty chart", elems["polyline"])
	}
	if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
		t.Errorf("chart has non-numbers:\n%s", b.String())
	}
}

func TestChartFromRecorder(t *testing.T) {
	rec := newRecorder(100 * time.Millisecond)
	p := rec.begin("sale")
	for i := 0; i < 50; i++ {
		rec.record(p, gateway, callBuy, 202, "queued", time.Duration(i)*time.Millisecond, false)
		rec.record(p, baseline, callBuy, 200, "respond", time.Millisecond, false)
	}
	c := chartFrom(rec, "t")
	if len(c.Points[gateway]) == 0 || len(c.Marks) != 1 {
		t.Fatalf("%d points, %d marks", len(c.Points[gateway]), len(c.Marks))
	}
	var n int64
	for _, pt := range c.Points[gateway] {
		n += pt.Requests
	}
	if n != 50 {
		t.Fatalf("chart holds %d requests, want 50", n)
	}
	var b bytes.Buffer
	renderChart(&b, c)
	parseSVG(t, b.Bytes())
}
