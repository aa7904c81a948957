package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/textfmt"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

var funcs = template.FuncMap{
	"num":     num,
	"bytes":   bytesText,
	"time":    timeText,
	"seconds": seconds,
	"join":    strings.Join,
	"dur":     func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"deref":   func(p *int64) int64 { return *p },
	"derefF":  func(p *float64) float64 { return *p },
	"int64":   func(i int) int64 { return int64(i) },
}

// num formats n with thousands separators.
func num(n int64) string { return textfmt.Num(n) }

// bytesText formats a size in bytes: 512 B, 1.5 KiB, 3.2 MiB.
func bytesText(n int64) string { return textfmt.Bytes(n) }

// timeText formats t in UTC to the millisecond; "-" when zero.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// seconds formats a duration given in seconds.
func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

// offsetText is an offset as JSON, as the CLI prints it.
func offsetText(o query.Offset) string {
	b, err := json.Marshal(o)
	if err != nil {
		return o.String()
	}
	return string(b)
}

func urlHost(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

func offsetsID(name, key string) offsets.ID { return offsets.ID{Name: name, Key: key} }

// point is one point of a line chart.
type point struct {
	At    time.Time
	Value float64
	Label string
}

// chart is a line chart drawn on the server as SVG: the page needs no
// script to show it.
type chart struct {
	ID     string
	Title  string
	Width  int
	Height int
	Line   string // the polyline's points
	Dots   []dot
	YMax   string
	XFrom  string
	XTo    string
	Empty  bool
}

type dot struct {
	X, Y  float64
	Label string
}

const (
	chartW, chartH = 720, 180
	chartPad       = 36
)

// lineChart draws the points, oldest first.
func lineChart(id, title string, pts []point) chart {
	c := chart{ID: id, Title: title, Width: chartW, Height: chartH, Empty: len(pts) == 0}
	if c.Empty {
		return c
	}
	top := 0.0
	for _, p := range pts {
		top = max(top, p.Value)
	}
	if top == 0 {
		top = 1
	}
	t0, t1 := pts[0].At, pts[len(pts)-1].At
	span := t1.Sub(t0).Seconds()
	var line []string
	for i, p := range pts {
		x := float64(chartPad)
		if span > 0 {
			x += p.At.Sub(t0).Seconds() / span * float64(chartW-2*chartPad)
		} else if len(pts) > 1 {
			x += float64(i) / float64(len(pts)-1) * float64(chartW-2*chartPad)
		}
		y := float64(chartH-chartPad) - p.Value/top*float64(chartH-2*chartPad)
		c.Dots = append(c.Dots, dot{x, y, p.Label})
		line = append(line, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	c.Line = strings.Join(line, " ")
	c.YMax = strconv.FormatFloat(top, 'f', 1, 64)
	c.XFrom, c.XTo = t0.UTC().Format("15:04:05"), t1.UTC().Format("15:04:05")
	return c
}
