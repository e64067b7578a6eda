// chart.js: small SVG charts drawn here (no library): lines and stacked
// bars over time, with axes, a legend, a text alternative and the numbers
// in a table under a disclosure.

import {h, s} from './dom.js';

const W = 640, H = 220, L = 52, R = 12, T = 12, B = 28;

export const palette = ['#1d4ed8', '#b91c1c', '#047857', '#b45309', '#6d28d9', '#0e7490', '#be185d', '#4d7c0f'];

// scale picks the y axis for values up to v: a step of 1, 2 or 5 × 10^k
// and at most five steps.
function scale(v) {
  if (!(v > 0)) return {max: 1, step: 0.25};
  for (let p = Math.pow(10, Math.floor(Math.log10(v)) - 1); ; p *= 10) {
    for (const m of [1, 2, 5]) {
      const step = m * p;
      if (v / step <= 5) return {max: Math.ceil(v / step - 1e-9) * step, step};
    }
  }
}

function timeLabel(t, spanMs) {
  const d = new Date(t);
  const hm = d.toLocaleTimeString('en-GB', {hour: '2-digit', minute: '2-digit', hour12: false});
  return spanMs > 36 * 3600e3 ? d.toLocaleDateString('en-GB', {day: '2-digit', month: 'short'}) + ' ' + hm : hm;
}

// number shows v with as many decimals as ticks of step need, and its
// unit ('%', '$' or 's').
export function number(v, step, unit) {
  let d = 0;
  while (d < 4 && Math.abs(step * 10 ** d - Math.round(step * 10 ** d)) > 1e-9) d++;
  const t = (Math.round(v * 10 ** d) / 10 ** d).toFixed(d);
  return unit === '$' ? '$' + t : unit ? t + unit : t;
}

// chart draws series over shared times. opts: {title, times: [ms...],
// series: [{name, values: [...], color}], kind: 'line'|'bars' (stacked),
// unit: '' | '%' | '$' | 's'}. A null value is a gap in a line (a bucket
// with nothing to say).
export function chart(opts) {
  const {title, times, series, kind = 'line', unit = ''} = opts;
  const n = times.length;
  const stackTop = new Array(n).fill(0);
  let max = 0;
  if (kind === 'bars') {
    for (const se of series) se.values.forEach((v, i) => { stackTop[i] += v || 0; });
    max = Math.max(0, ...stackTop);
  } else {
    for (const se of series) for (const v of se.values) max = Math.max(max, v || 0);
  }
  const sc = scale(max);
  max = sc.max;
  const fmt = (v) => number(v, sc.step, unit);
  const exact = (v) => {
    if (v === null || v === undefined) return '–';
    const t = String(+Number(v).toPrecision(4));
    return unit === '$' ? '$' + t : t + unit;
  };
  const x = (i) => L + (n <= 1 ? 0 : (i * (W - L - R)) / (kind === 'bars' ? n : n - 1));
  const y = (v) => T + (H - T - B) * (1 - (v || 0) / max);
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: chart`, class: 'chart', preserveAspectRatio: 'xMidYMid meet'});
  svg.append(s('title', null, title));
  // Grid and y axis.
  for (let k = 0; k * sc.step <= max + 1e-9; k++) {
    const v = k * sc.step, yy = y(v);
    svg.append(s('line', {x1: L, x2: W - R, y1: yy, y2: yy, class: 'grid'}));
    svg.append(s('text', {x: L - 6, y: yy + 4, 'text-anchor': 'end', class: 'tick'}, fmt(v)));
  }
  // x axis: about 6 labels.
  const span = n > 1 ? times[n - 1] - times[0] : 0;
  const every = Math.max(1, Math.ceil(n / 6));
  for (let i = 0; i < n; i += every) {
    svg.append(s('text', {x: x(i) + (kind === 'bars' ? (W - L - R) / n / 2 : 0), y: H - 8, 'text-anchor': 'middle', class: 'tick'}, timeLabel(times[i], span)));
  }
  if (kind === 'bars') {
    const bw = Math.max(1, (W - L - R) / Math.max(1, n) - 2);
    const base = new Array(n).fill(0);
    series.forEach((se, si) => {
      const color = se.color || palette[si % palette.length];
      se.values.forEach((v, i) => {
        if (!v) return;
        const y0 = y(base[i]), y1 = y(base[i] + v);
        base[i] += v;
        svg.append(s('rect', {x: x(i) + 1, y: y1, width: bw, height: Math.max(0.5, y0 - y1), fill: color},
          s('title', null, `${se.name} ${timeLabel(times[i], span)}: ${exact(v)}`)));
      });
    });
  } else {
    series.forEach((se, si) => {
      const color = se.color || palette[si % palette.length];
      // One polyline per run of values; a lone value is a dot.
      let run = [];
      const flush = () => {
        if (run.length === 1) svg.append(s('circle', {cx: x(run[0]), cy: y(se.values[run[0]]), r: 2.5, fill: color}));
        else if (run.length > 1) svg.append(s('polyline', {points: run.map((i) => `${x(i).toFixed(1)},${y(se.values[i]).toFixed(1)}`).join(' '), fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-linejoin': 'round'}));
        run = [];
      };
      se.values.forEach((v, i) => { if (v === null || v === undefined) flush(); else run.push(i); });
      flush();
    });
  }
  svg.append(s('line', {x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis'}));
  const legend = h('ul', {class: 'legend'}, series.map((se, si) =>
    h('li', null, h('span', {class: 'swatch', 'data-color': si % palette.length}), se.name)));
  legend.querySelectorAll('.swatch').forEach((el, si) => {
    el.append(s('svg', {viewBox: '0 0 10 10', width: 10, height: 10, 'aria-hidden': 'true'},
      s('rect', {width: 10, height: 10, fill: series[si].color || palette[si % palette.length]})));
  });
  const rows = times.map((t, i) => h('tr', null, h('th', {scope: 'row'}, timeLabel(t, span)), series.map((se) => h('td', {class: 'num'}, exact(se.values[i])))));
  const data = h('details', {class: 'chart-data'}, h('summary', null, 'Numbers'),
    h('table', null, h('caption', null, title),
      h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'time'), series.map((se) => h('th', {scope: 'col'}, se.name)))),
      h('tbody', null, rows)));
  return h('figure', {class: 'chart-box'}, h('figcaption', null, title), svg, legend, data);
}
