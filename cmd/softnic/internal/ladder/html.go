package ladder

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/softnic/softnic/wire"
)

// The SVG drawing's geometry, in pixels.
const (
	svgMargin = 120 // left of the first conversation: the arrow numbers and times
	svgLane   = 600 // one conversation: its two columns and the arrows between
	svgInset  = 50  // from a lane's edge to its column
	svgHeader = 70  // the endpoints' names above the columns
	svgRow    = 36  // one arrow
)

// Style is the CSS of the classes WriteSVG uses, for a page that embeds the
// drawing (WriteHTML includes it).
const Style = `svg.ladder { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #fff; }
svg.ladder .column { stroke: #888; stroke-width: 1.5; }
svg.ladder .endpoint { font-weight: bold; text-anchor: middle; }
svg.ladder .conv { fill: #555; text-anchor: middle; }
svg.ladder .when { fill: #666; text-anchor: end; }
svg.ladder .arrow line { stroke: #1f5fa8; stroke-width: 1.5; }
svg.ladder .arrow text.label { fill: #111; text-anchor: middle; }
svg.ladder .arrow text.badge { font-size: 11px; text-anchor: middle; }
svg.ladder .marker { fill: #1f5fa8; }
svg.ladder .marker.warn { fill: #c77800; }
svg.ladder .marker.bad { fill: #c0262d; }
svg.ladder .gap { fill: #888; font-size: 11px; text-anchor: end; }
svg.ladder .warn line { stroke: #c77800; }
svg.ladder .warn text.badge { fill: #a05f00; }
svg.ladder .bad line { stroke: #c0262d; }
svg.ladder .bad text.badge, svg.ladder .cross { fill: #c0262d; }
svg.ladder .lost line { stroke-dasharray: 5 4; }
svg.ladder .cross { font-size: 16px; text-anchor: middle; }
`

// severity orders the anomalies for an arrow's color: bad for what broke a
// packet or refused a request, warn for what recovered from it.
func severity(a *Arrow) string {
	class := ""
	for _, an := range a.Anomalies {
		switch an.Kind {
		case BadICRC, Lost, NAK, Undecodable, OutOfSequence, Missing:
			return "bad"
		default:
			class = "warn"
		}
	}
	return class
}

// WriteHTML writes the ladder as one HTML page that needs nothing else to
// view: a summary, the anomalies with links to their arrows, and the
// drawing (WriteSVG), with the CSS inline and no script. title names it.
func WriteHTML(w io.Writer, l *Ladder, title string) error {
	bw := bufio.NewWriter(w)
	arrows, convs := l.Arrows(), l.Conversations()
	e := html.EscapeString
	fmt.Fprintf(bw, `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>%s</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #111; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.kind { white-space: nowrap; }
%s</style>
</head>
<body>
<h1>%s</h1>
<p>%d %s in %d %s; %s.</p>
`, e(title), Style, e(title), len(arrows), plural(len(arrows), "packet", "packets"),
		len(convs), plural(len(convs), "conversation", "conversations"), e(Summary(arrows)))
	fmt.Fprintf(bw, "<ul>\n")
	for _, c := range convs {
		fmt.Fprintf(bw, "<li>conversation %d: %s %s ⇄ %s, %d %s", c.ID, e(c.Transport), e(c.A.String()), e(c.B.String()),
			c.Packets, plural(c.Packets, "packet", "packets"))
		if c.ACKTimeout > 0 {
			fmt.Fprintf(bw, ", ACK timeout %s", e(Duration(c.ACKTimeout)))
		}
		fmt.Fprintf(bw, "</li>\n")
	}
	fmt.Fprintf(bw, "</ul>\n")
	if an := l.Anomalies(); len(an) > 0 {
		fmt.Fprintf(bw, "<table>\n<tr><th>arrow</th><th>anomaly</th><th>what the packets show</th></tr>\n")
		for _, a := range an {
			fmt.Fprintf(bw, "<tr><td><a href=\"#a%d\">%d</a></td><td class=\"kind\">%s</td><td>%s</td></tr>\n", a.Seq, a.Seq, e(a.Kind.String()), e(a.Text))
		}
		fmt.Fprintf(bw, "</table>\n")
	}
	if err := WriteSVG(bw, arrows, convs); err != nil {
		return err
	}
	fmt.Fprintf(bw, "</body>\n</html>\n")
	return bw.Flush()
}

// WriteSVG draws arrows as an SVG element of class "ladder" (see Style):
// the conversations side by side, two columns each, and one row per arrow
// in the order given, each a group with id "a" and its number, holding a
// line, the label and, under it, the names of its anomalies; hovering
// shows their explanation. A live page draws the last arrows of a running
// ladder with it.
func WriteSVG(w io.Writer, arrows []Arrow, convs []Conversation) error {
	e := html.EscapeString
	lane := make(map[int]int, len(convs))
	for i, c := range convs {
		lane[c.ID] = i
	}
	width := svgMargin + svgLane*max(len(convs), 1)
	height := svgHeader + svgRow*len(arrows) + svgRow/2
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" class="ladder" width="%d" height="%d" viewBox="0 0 %d %d">
<defs>
`, width, height, width, height)
	for _, sev := range []string{"", "warn", "bad"} {
		fmt.Fprintf(bw, `<marker id="head%s" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto">`+
			`<path class="%s" d="M0,0 L10,5 L0,10 z"/></marker>
`, sev, strings.TrimSpace("marker "+sev))
	}
	fmt.Fprintf(bw, "</defs>\n")
	for i, c := range convs {
		x0 := svgMargin + i*svgLane
		xa, xb := x0+svgInset, x0+svgLane-svgInset
		fmt.Fprintf(bw, "<text class=\"conv\" x=\"%d\" y=\"16\">conversation %d: %s</text>\n", x0+svgLane/2, c.ID, e(c.Transport))
		for _, ep := range []struct {
			x int
			e Endpoint
		}{{xa, c.A}, {xb, c.B}} {
			fmt.Fprintf(bw, "<text class=\"endpoint\" x=\"%d\" y=\"38\">%s</text>\n", ep.x, e(ep.e.Addr.String()))
			qp := "QP ?"
			if ep.e.QPKnown {
				qp = "QP " + hex6(ep.e.QP)
			}
			fmt.Fprintf(bw, "<text class=\"endpoint\" x=\"%d\" y=\"54\">%s</text>\n", ep.x, e(qp))
			fmt.Fprintf(bw, "<line class=\"column\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n", ep.x, svgHeader-8, ep.x, height)
		}
	}
	for i := range arrows {
		a := &arrows[i]
		x0 := svgMargin + lane[a.Conv]*svgLane
		from, to := x0+svgInset, x0+svgLane-svgInset
		if !a.FromA {
			from, to = to, from
		}
		y := svgHeader + svgRow*i + svgRow/2
		sev := severity(a)
		class := strings.TrimSpace("arrow " + sev)
		end, head := to, ` marker-end="url(#head`+sev+`)"`
		if a.Lost {
			class += " lost"
			end, head = from+(to-from)*3/4, ""
		}
		fmt.Fprintf(bw, "<g id=\"a%d\" class=\"%s\"><title>%s</title>\n", a.Seq, class, e(tooltip(a)))
		if i > 0 && a.Time-arrows[i-1].Time >= gapShown {
			fmt.Fprintf(bw, "<text class=\"gap\" x=\"%d\" y=\"%d\">⋮ %s</text>\n", svgMargin-10, y-svgRow/2+3, e(Duration(a.Time-arrows[i-1].Time)))
		}
		fmt.Fprintf(bw, "<text class=\"when\" x=\"%d\" y=\"%d\">%d  %.6f</text>\n", svgMargin-10, y+4, a.Seq, a.Time.Seconds())
		fmt.Fprintf(bw, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"%s/>\n", from, y, end, y, head)
		if a.Lost || a.ICRC == wire.ICRCBad && a.Err == "" {
			fmt.Fprintf(bw, "<text class=\"cross\" x=\"%d\" y=\"%d\">✗</text>\n", end, y+5)
		}
		fmt.Fprintf(bw, "<text class=\"label\" x=\"%d\" y=\"%d\">%s</text>\n", (from+to)/2, y-5, e(a.Label))
		if len(a.Anomalies) > 0 {
			fmt.Fprintf(bw, "<text class=\"badge\" x=\"%d\" y=\"%d\">%s</text>\n", (from+to)/2, y+13, e(badges(a)))
		}
		fmt.Fprintf(bw, "</g>\n")
	}
	fmt.Fprintf(bw, "</svg>\n")
	return bw.Flush()
}

// tooltip is an arrow's hover text: its packet and every anomaly.
func tooltip(a *Arrow) string {
	lines := []string{fmt.Sprintf("%d  %.6f  %v → %v  %s", a.Seq, a.Time.Seconds(), a.Src, a.Dst, a.Label)}
	for _, an := range a.Anomalies {
		lines = append(lines, an.Text)
	}
	if a.Note != "" {
		lines = append(lines, "("+a.Note+")")
	}
	return strings.Join(lines, "\n")
}

// badges names an arrow's anomalies in a few words: "retransmission
// (timeout) · duplicate".
func badges(a *Arrow) string {
	var names []string
	for _, an := range a.Anomalies {
		s := an.Kind.String()
		if an.Cause != 0 {
			s += " (" + an.Cause.String() + ")"
		}
		names = append(names, s)
	}
	return strings.Join(names, " · ")
}
