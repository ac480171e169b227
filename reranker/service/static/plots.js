// The page's two plots, drawn as SVG from the API's numbers (no library: two plots do
// not need one, and the page loads nothing from elsewhere).
//
//   timeline(body, width)   an experiment's share of preferences over time, with its band
//                           (the always-valid confidence sequence: safe to watch)
//   deltas(rows, width)     one bar per query: a ranker's figure minus the baseline's
//   isEmpty(point), when(iso, interval)   what the card's words about the plot share with it
//
// The two plots return an <svg> sized to `width` CSS pixels (the space its container has), so its
// text stays legible on a phone instead of shrinking with a fixed viewBox. Every text is
// set with textContent. Colours come from app.css (classes), not from inline styles.
"use strict";

window.RerankerPlots = (function () {
  const SVG = "http://www.w3.org/2000/svg";
  const HEIGHT = 220;
  const MARGIN = { top: 12, right: 14, bottom: 40, left: 46 };
  // Below this many CSS pixels the axes and labels no longer fit.
  const MIN_WIDTH = 260;

  function node(tag, attributes, text) {
    const element = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes || {})) element.setAttribute(name, String(value));
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function frame(width, label) {
    const svg = node("svg", {
      width,
      height: HEIGHT,
      viewBox: `0 0 ${width} ${HEIGHT}`,
      role: "img",
      "aria-label": label,
      class: "plot-svg",
    });
    svg.append(node("title", {}, label));
    return svg;
  }

  function scale(domainLow, domainHigh, rangeLow, rangeHigh) {
    const span = domainHigh - domainLow || 1;
    return (value) => rangeLow + ((value - domainLow) / span) * (rangeHigh - rangeLow);
  }

  function yAxis(svg, y, ticks, format, x0, x1) {
    for (const tick of ticks) {
      const at = y(tick);
      svg.append(node("line", { x1: x0, x2: x1, y1: at, y2: at, class: "plot-grid" }));
      svg.append(node("text", { x: x0 - 6, y: at + 4, "text-anchor": "end", class: "plot-tick" }, format(tick)));
    }
  }

  function percent(value) {
    return `${Math.round(value * 100)}%`;
  }

  // --- an experiment over time -------------------------------------------------------

  // Is a point's always-valid interval empty (no share fits every moment so far)?
  function isEmpty(point) {
    return point.low > point.high;
  }

  function when(iso, interval) {
    // UTC, as the API buckets: "2026-11-20" by the day, "11-20 09:00" by the hour.
    return interval === "day" ? iso.slice(0, 10) : `${iso.slice(5, 10)} ${iso.slice(11, 16)}`;
  }

  function timeline(body, width) {
    width = Math.max(MIN_WIDTH, Math.floor(width));
    const [first, second] = body.experiment.rankers;
    const points = body.periods
      .filter((period) => period.cumulative.share !== null)
      .map((period) => ({ period, t: Date.parse(period.end), ...period.cumulative }));
    const last = points[points.length - 1];
    // The confidence sequence is the running intersection of every interval so far: with
    // chance at most 1 - confidence (or when the preference changed) it is empty, low > high,
    // and stays so. Those points get no band and no interval written backwards.
    const interval = (p) => (isEmpty(p) ? "empty" : `${percent(p.low)}-${percent(p.high)}`);
    const label = last
      ? `${first}'s share of the units with a preference: ${percent(last.share)} ` +
        (isEmpty(last)
          ? `(the ${percent(body.confidence)} always-valid interval is empty) `
          : `(${percent(body.confidence)} always-valid interval ${percent(last.low)} to ${percent(last.high)}) `) +
        `after ${last.wins[first] + last.wins[second]} such units, by ${when(last.period.end, body.interval)} UTC`
      : "No unit with a preference yet.";
    const svg = frame(width, label);
    const left = MARGIN.left;
    const right = width - MARGIN.right;
    const top = MARGIN.top;
    const bottom = HEIGHT - MARGIN.bottom;
    const y = scale(0, 1, bottom, top);
    yAxis(svg, y, [0, 0.25, 0.5, 0.75, 1], percent, left, right);
    svg.append(node("line", { x1: left, x2: right, y1: y(0.5), y2: y(0.5), class: "plot-even" }));
    if (!last) {
      svg.append(node("text", { x: (left + right) / 2, y: y(0.5) - 8, "text-anchor": "middle", class: "plot-note" }, "no preference yet"));
      return svg;
    }
    // The time axis runs from the first period's start to the last one's end: each point
    // sits at the end of its period, when its counts were complete.
    const t0 = Date.parse(body.periods[0].start);
    const t1 = Date.parse(body.periods[body.periods.length - 1].end);
    const x = scale(t0, t1, left, right);
    const banded = points.filter((p) => !isEmpty(p)); // a prefix: once empty, always empty
    if (banded.length === 1) {
      // One interval is no band through time: the point's interval, drawn as an error bar
      // (the card says in words that the band needs two or more periods).
      const only = banded[0];
      const at = x(only.t);
      const bar = node("g", { class: "plot-interval" });
      bar.append(node("title", {}, `${percent(body.confidence)} always-valid interval ${interval(only)}`));
      bar.append(node("line", { x1: at, x2: at, y1: y(only.low), y2: y(only.high) }));
      for (const end of [only.low, only.high]) bar.append(node("line", { x1: at - 6, x2: at + 6, y1: y(end), y2: y(end) }));
      svg.append(bar);
    } else if (banded.length > 1) {
      const outline = [...banded.map((p) => `${x(p.t)},${y(p.high)}`), ...banded.slice().reverse().map((p) => `${x(p.t)},${y(p.low)}`)];
      svg.append(node("polygon", { points: outline.join(" "), class: "plot-band" }));
    }
    if (points.length > 1) {
      svg.append(node("polyline", { points: points.map((p) => `${x(p.t)},${y(p.share)}`).join(" "), class: "plot-line" }));
    }
    for (const p of points) {
      const dot = node("circle", { cx: x(p.t), cy: y(p.share), r: 3.5, class: "plot-dot" });
      const decided = p.wins[first] + p.wins[second];
      dot.append(node("title", {}, `by ${when(p.period.end, body.interval)} UTC: ${first} preferred on ${p.wins[first]} of ${decided} ` +
        `(${percent(p.share)}, always-valid interval ${interval(p)}), ${p.p_value < 1e-4 ? "p < 0.0001" : `p = ${p.p_value.toFixed(4)}`}`));
      svg.append(dot);
    }
    // Labels at both ends of the time axis (and the middle when there is room).
    const ticks = width >= 480 ? [t0, (t0 + t1) / 2, t1] : [t0, t1];
    ticks.forEach((t, i) => {
      const anchor = i === 0 ? "start" : i === ticks.length - 1 ? "end" : "middle";
      const iso = new Date(t).toISOString();
      svg.append(node("text", { x: x(t), y: bottom + 16, "text-anchor": anchor, class: "plot-tick" }, when(iso, body.interval)));
    });
    svg.append(node("text", { x: (left + right) / 2, y: HEIGHT - 6, "text-anchor": "middle", class: "plot-axis" }, `time (UTC, by the ${body.interval})`));
    return svg;
  }

  // --- per-query wins and losses -------------------------------------------------------

  // rows: [{query, value, reference}], a ranker's figure and the baseline's per query.
  function deltas(rows, width, labels) {
    width = Math.max(MIN_WIDTH, Math.floor(width));
    const sorted = rows
      .map((row) => ({ ...row, delta: row.value - row.reference }))
      .sort((a, b) => b.delta - a.delta);
    const svg = frame(width, labels.summary);
    const left = MARGIN.left;
    const right = width - MARGIN.right;
    const top = MARGIN.top;
    const bottom = HEIGHT - MARGIN.bottom;
    const reach = Math.max(...sorted.map((row) => Math.abs(row.delta)), 0) || 1;
    const y = scale(-reach, reach, bottom, top);
    yAxis(svg, y, [-reach, 0, reach], (v) => (v > 0 ? "+" : "") + v.toFixed(2), left, right);
    const slot = (right - left) / Math.max(1, sorted.length);
    const gap = slot > 4 ? 1 : 0;
    sorted.forEach((row, i) => {
      const kind = row.delta > 1e-12 ? "win" : row.delta < -1e-12 ? "loss" : "tie";
      const x = left + i * slot + gap / 2;
      const y0 = y(0);
      const y1 = y(row.delta);
      // A tie is a short mark on the zero line, so every query is there to point at.
      const height = kind === "tie" ? 2 : Math.max(1, Math.abs(y1 - y0));
      const bar = node("rect", {
        x,
        y: kind === "tie" ? y0 - 1 : Math.min(y0, y1),
        width: Math.max(0.5, slot - gap),
        height,
        class: `plot-bar plot-${kind}`,
        "data-query": row.query,
      });
      bar.append(node("title", {}, `query ${row.query}: ${row.value.toFixed(3)} vs ${row.reference.toFixed(3)} (Δ ${(row.delta >= 0 ? "+" : "") + row.delta.toFixed(3)})`));
      svg.append(bar);
    });
    svg.append(node("line", { x1: left, x2: right, y1: y(0), y2: y(0), class: "plot-zero" }));
    svg.append(node("text", { x: (left + right) / 2, y: HEIGHT - 6, "text-anchor": "middle", class: "plot-axis" }, `${sorted.length} queries, sorted by Δ ${labels.metric}`));
    return svg;
  }

  return { timeline, deltas, isEmpty, when };
})();
