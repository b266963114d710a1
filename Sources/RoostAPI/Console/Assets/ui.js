// Small DOM helpers and the SVG charts the console draws itself. Text goes
// in through textContent only: no markup is ever built from data.

const SVG = 'http://www.w3.org/2000/svg';

/** Returns an element: attrs sets attributes (`on…` adds listeners, `text` the text). */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(tag), attrs, children);
}

function svg(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

function build(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') element.textContent = String(value);
    else if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** Returns a table with a caption, column headers and rows of cells (Nodes or text). */
export function table(caption, columns, rows) {
  return h('table', {},
    h('caption', { text: caption }),
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col', text: c })))),
    h('tbody', {}, rows.map((row) => h('tr', {}, row.map((cell) => h('td', {}, cell))))));
}

/** Returns a definition list of [term, value] pairs. */
export function fields(pairs) {
  return h('dl', { class: 'fields' }, pairs.flatMap(([term, value]) => [h('dt', { text: term }), h('dd', {}, value)]));
}

/** Formats a count with thousands separators. */
export function count(n) {
  return Number(n).toLocaleString('en-US');
}

/** Returns an RFC 3339 time as it reads in the page, or "never". */
export function when(value) {
  if (!value) return 'never';
  return value.replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC');
}

let chartNumber = 0;

/**
 * Returns a horizontal bar chart: bars is [{label, value}]. The SVG has a
 * title and a description that states every value, so a screen reader
 * hears the numbers the bars show.
 */
export function barChart(title, bars) {
  chartNumber += 1;
  const id = `chart-${chartNumber}`;
  const rowHeight = 28;
  const labelWidth = 150;
  const width = 520;
  const height = Math.max(1, bars.length) * rowHeight + 8;
  const max = Math.max(1, ...bars.map((b) => b.value));
  const description = bars.map((b) => `${b.label}: ${count(b.value)}`).join('; ') || 'no data';
  const chart = svg('svg', {
    class: 'chart', role: 'img', viewBox: `0 0 ${width} ${height}`, width, height,
    'aria-labelledby': `${id}-title ${id}-desc`,
  },
  svg('title', { id: `${id}-title`, text: title }),
  svg('desc', { id: `${id}-desc`, text: description }),
  bars.map((bar, index) => {
    const y = 4 + index * rowHeight;
    const barWidth = Math.round(((width - labelWidth - 80) * bar.value) / max);
    return svg('g', {},
      svg('text', { x: 0, y: y + 18, class: 'chart-label', text: bar.label }),
      svg('rect', { x: labelWidth, y: y + 4, width: Math.max(bar.value > 0 ? 2 : 0, barWidth), height: 18,
        class: `bar bar-${index % 4}` }),
      svg('text', { x: labelWidth + barWidth + 6, y: y + 18, class: 'chart-value', text: count(bar.value) }));
  }));
  return h('figure', { class: 'figure' }, chart, h('figcaption', { text: title }));
}

/** Returns a line chart of the last readings (numbers), with its title. */
export function sparkline(title, values, unit) {
  chartNumber += 1;
  const id = `chart-${chartNumber}`;
  const width = 520;
  const height = 90;
  const max = Math.max(1e-9, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = values.map((v, i) => `${Math.round(i * step)},${Math.round(height - 6 - ((height - 12) * v) / max)}`);
  const last = values.length ? values[values.length - 1] : null;
  const description = last === null ? 'no reading yet'
    : `${values.length} readings, the last ${last.toFixed(2)} ${unit}, the highest ${max.toFixed(2)} ${unit}`;
  return h('figure', { class: 'figure' },
    svg('svg', { class: 'chart', role: 'img', viewBox: `0 0 ${width} ${height}`, width, height,
      'aria-labelledby': `${id}-title ${id}-desc` },
    svg('title', { id: `${id}-title`, text: title }),
    svg('desc', { id: `${id}-desc`, text: description }),
    svg('line', { x1: 0, y1: height - 6, x2: width, y2: height - 6, class: 'axis' }),
    values.length > 1 ? svg('polyline', { points: points.join(' '), class: 'line' }) : null),
    h('figcaption', { text: `${title}: ${description}` }));
}

/** Opens a modal confirmation; resolves true when the person confirms. */
export function confirmDialog(question, confirmLabel) {
  return new Promise((resolve) => {
    const dialog = h('dialog', { class: 'dialog', 'aria-labelledby': 'dialog-question' });
    const finish = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h('p', { id: 'dialog-question', text: question }),
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'danger', text: confirmLabel, onclick: () => finish(true) }),
        h('button', { type: 'button', text: 'Cancel', onclick: () => finish(false) })));
    dialog.addEventListener('cancel', (event) => {
      event.preventDefault();
      finish(false);
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}
