// The views. Each takes a context {api, session, container, signal,
// argument, say, go}, fills its container and may keep working (a long poll)
// until `signal` aborts; errors it throws are said in words by the shell.

import { ApiError, seg } from './api.js';
import { barChart, confirmDialog, count, fields, h, sparkline, table, when } from './ui.js';

const CAPABILITIES = ['devices:write', 'devices:read', 'devices:delete', 'people:write', 'setup:write'];

function title(text) {
  return h('h1', { id: 'view-title', tabindex: '-1', text });
}

function errorText(error) {
  return error instanceof ApiError ? error.describe() : `Something went wrong: ${error}`;
}

/** Returns a paragraph that says an error as an alert. */
function alert(error) {
  return h('p', { class: 'error', role: 'alert', text: errorText(error) });
}

function modeName(session) {
  return session.mode ? `${session.mode} mode` : 'this key\'s mode';
}

// MARK: Apps (operator)

async function apps(context) {
  const { api, container } = context;
  container.append(title('Apps'));
  const { json } = await api.get('/v1/apps', { signal: context.signal });
  const list = json.apps;
  const createName = h('input', { id: 'new-app-name', type: 'text', required: true, maxlength: 200 });
  const createResult = h('div', { role: 'status', 'aria-live': 'polite' });
  container.append(h('form', {
    class: 'inline-form',
    onsubmit: async (event) => {
      event.preventDefault();
      try {
        const created = await api.request('POST', '/v1/apps', { body: { name: createName.value } });
        context.say(`App ${created.json.id} "${created.json.name}" created.`);
        context.go(`#/apps/${created.json.id}`);
      } catch (error) {
        createResult.replaceChildren(alert(error));
      }
    },
  }, h('label', { for: 'new-app-name', text: 'New app name' }), createName,
  h('button', { type: 'submit', text: 'Create app' })), createResult);
  if (list.length === 0) {
    container.append(h('p', { class: 'empty', text: 'No apps yet. Create one above to get its keys.' }));
    return;
  }
  container.append(table('Apps and their settings',
    ['Id', 'Name', 'Created', 'Devices per person', 'Known people only', 'Inactive after', 'Keys'],
    list.map((app) => [
      String(app.id), app.name, when(app.created_at), String(app.settings.max_devices_per_person),
      app.settings.require_known_person ? 'yes' : 'no',
      app.settings.inactive_after_days === null ? 'off' : `${app.settings.inactive_after_days} days`,
      h('a', { href: `#/apps/${app.id}`, text: `Keys of ${app.name}` }),
    ])));
  const selected = list.find((app) => String(app.id) === context.argument);
  if (selected) await appKeys(context, selected);
}

async function appKeys(context, app) {
  const { api, container } = context;
  const section = h('section', { 'aria-labelledby': 'keys-title' });
  container.append(section);
  const render = async () => {
    const { json } = await api.get(`/v1/apps/${app.id}/keys`, { signal: context.signal });
    const rows = json.keys.map((key) => [
      key.label || '(no label)', key.id, key.kind, key.mode, key.capabilities.length ? key.capabilities.join(', ') : 'none',
      when(key.created_at), when(key.last_used_at),
      h('button', {
        type: 'button', class: 'danger', text: 'Revoke', 'aria-label': `Revoke key ${key.label || key.id}`,
        onclick: async () => {
          const sure = await confirmDialog(`Revoke key ${key.label || key.id}? Every request with it will be refused (401).`,
            'Revoke key');
          if (!sure) return;
          try {
            await api.request('DELETE', `/v1/apps/${app.id}/keys/${seg(key.id)}`);
            context.say(`Key ${key.label || key.id} revoked.`);
            await render();
          } catch (error) {
            section.append(alert(error));
          }
        },
      }),
    ]);
    section.replaceChildren(h('h2', { id: 'keys-title', text: `Keys of ${app.name} (app ${app.id})` }),
      rows.length ? table(`Keys of ${app.name}`, ['Label', 'Id', 'Kind', 'Mode', 'Capabilities', 'Created',
        'Last used', 'Action'], rows)
        : h('p', { class: 'empty', text: 'This app has no keys yet.' }),
      keyForm(context, app, render));
  };
  await render();
}

function keyForm(context, app, refresh) {
  const { api } = context;
  const kind = h('select', { id: 'key-kind' }, h('option', { value: 'secret', text: 'secret (backend)' }),
    h('option', { value: 'mobile', text: 'mobile (registers devices only)' }));
  const mode = h('select', { id: 'key-mode' }, h('option', { value: 'live', text: 'live' }),
    h('option', { value: 'test', text: 'test' }));
  const label = h('input', { id: 'key-label', type: 'text', maxlength: 200 });
  const boxes = CAPABILITIES.map((capability) => h('input', {
    type: 'checkbox', id: `cap-${capability.replace(':', '-')}`, value: capability,
  }));
  const result = h('div', { class: 'form-result', role: 'status', 'aria-live': 'polite' });
  return h('form', {
    class: 'key-form',
    onsubmit: async (event) => {
      event.preventDefault();
      const body = { kind: kind.value, mode: mode.value, label: label.value };
      if (kind.value === 'secret') body.capabilities = boxes.filter((b) => b.checked).map((b) => b.value);
      try {
        const created = await api.request('POST', `/v1/apps/${app.id}/keys`, { body });
        const value = h('input', { id: 'created-key-value', type: 'text', readonly: true, value: created.json.key,
          size: 60 });
        await refresh();
        const shown = h('div', { class: 'created-key', role: 'status' },
          h('p', { text: `Key ${created.json.id} created. Copy it now: it is shown this once and never again.` }),
          h('label', { for: 'created-key-value', text: 'New key' }), value,
          h('button', {
            type: 'button', text: 'Copy key',
            onclick: async (clicked) => {
              value.select();
              try {
                await navigator.clipboard.writeText(value.value);
              } catch (_) {
                document.execCommand('copy');
              }
              clicked.target.textContent = 'Copied';
            },
          }));
        document.getElementById('keys-title').after(shown);
      } catch (error) {
        result.replaceChildren(alert(error));
      }
    },
  }, h('h3', { text: 'Create a key' }),
  h('label', { for: 'key-kind', text: 'Kind' }), kind,
  h('label', { for: 'key-mode', text: 'Mode' }), mode,
  h('label', { for: 'key-label', text: 'Label' }), label,
  h('fieldset', {}, h('legend', { text: 'Capabilities (secret keys)' }),
    boxes.map((box) => h('span', { class: 'check' }, box, h('label', { for: box.id, text: box.value })))),
  h('button', { type: 'submit', text: 'Create key' }), result);
}

// MARK: Overview

async function overview(context) {
  const { api, container, session } = context;
  container.append(title('Overview'));
  if (session.kind === 'operator') {
    const { json } = await api.get('/v1/apps', { signal: context.signal });
    if (json.apps.length === 0) {
      container.append(h('p', { class: 'empty', text: 'No apps yet: create one under Apps.' }));
      return;
    }
    const details = await Promise.all(json.apps.map((app) => api.get(`/v1/apps/${app.id}`, { signal: context.signal })));
    const rows = [];
    const bars = [];
    for (const { json: app } of details) {
      for (const mode of ['live', 'test']) {
        const counts = app.counts[mode];
        rows.push([`${app.name} (app ${app.id})`, mode, count(counts.devices), count(counts.people)]);
        bars.push({ label: `${app.name} ${mode}`.slice(0, 22), value: counts.devices });
      }
    }
    container.append(
      h('p', { text: 'Devices and people of every app and mode. Active, invalidated and by-platform counts are read '
        + 'with an app\'s secret key holding devices:read: sign in with one to see them.' }),
      barChart('Devices per app and mode', bars),
      table('Devices and people per app and mode', ['App', 'Mode', 'Devices', 'People'], rows));
    return;
  }
  const { json: stats } = await api.get('/v1/stats', { signal: context.signal });
  container.append(h('p', { text: `This key's app, ${modeName(session)}.` }));
  if (stats.devices === 0) {
    container.append(h('p', { class: 'empty', text: 'No devices registered yet in this app and mode.' }));
  }
  container.append(
    fields([['Devices', count(stats.devices)], ['Active', count(stats.active)],
      ['Invalidated', count(stats.invalidated)], ['People', count(stats.people)]]),
    barChart('Devices by state', [{ label: 'active', value: stats.active },
      { label: 'invalidated', value: stats.invalidated }]),
    barChart('Devices by platform', Object.entries(stats.by_platform || {}).map(([label, value]) => ({ label, value }))));
}

// MARK: Search and people

const FINGERPRINT = /^[0-9a-f]{16}$/i;
const SCAN_DEVICES_MAX = 200000;

async function search(context) {
  const { api, container, argument } = context;
  container.append(title(`Search: ${argument}`));
  const field = document.getElementById('search');
  if (field && !field.value) field.value = argument;
  if (argument.startsWith('dev_')) {
    const { json: device } = await api.get(`/v1/devices/${seg(argument)}`, { signal: context.signal });
    if (device.external_id) await person(context, device.external_id);
    else container.append(h('p', {}, 'This device belongs to no person. ', deviceLink(device)));
    return;
  }
  try {
    await person(context, argument);
    return;
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404 || !FINGERPRINT.test(argument)) {
      if (error instanceof ApiError && error.status === 404) {
        container.append(h('p', { class: 'empty', role: 'status',
          text: `Nobody with external id "${argument}" in this app and mode, and no device with that id.` }));
        return;
      }
      throw error;
    }
  }
  await byFingerprint(context, argument.toLowerCase());
}

/** Finds the device whose token has this fingerprint by reading the export (tokens stay in memory). */
async function byFingerprint(context, fingerprint) {
  const { api, container } = context;
  if (!(window.crypto && crypto.subtle)) {
    container.append(h('p', { class: 'error', role: 'alert', text: 'Searching by token fingerprint needs a secure '
      + 'context (HTTPS or localhost): this browser offers no SHA-256 here.' }));
    return;
  }
  const progress = h('p', { role: 'status', text: 'Looking for the token fingerprint in the export…' });
  container.append(progress);
  const response = await api.stream('/v1/devices/export', context.signal);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let scanned = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buffer += value;
    const lines = buffer.split('\n');
    buffer = done ? '' : lines.pop();
    for (const line of lines) {
      if (!line) continue;
      const device = JSON.parse(line);
      scanned += 1;
      const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(device.token));
      const hex = [...new Uint8Array(digest).slice(0, 8)].map((b) => b.toString(16).padStart(2, '0')).join('');
      if (hex === fingerprint) {
        reader.cancel();
        progress.remove();
        if (device.external_id) await person(context, device.external_id);
        else container.append(h('p', {}, 'This device belongs to no person. ', deviceLink(device)));
        return;
      }
      if (scanned >= SCAN_DEVICES_MAX) {
        reader.cancel();
        progress.textContent = `No device among the first ${count(scanned)} has token fingerprint ${fingerprint}.`;
        return;
      }
    }
    if (done) break;
  }
  progress.textContent = `Nobody with external id "${fingerprint}", and no device of this app and mode has `
    + `token fingerprint ${fingerprint} (${count(scanned)} devices read).`;
}

function deviceLink(device) {
  return h('a', { href: `#/device/${seg(device.id)}`, text: device.id });
}

function stateWords(device) {
  return device.invalidated_at ? `invalidated (${device.invalidation_reason || 'no reason'})` : 'active';
}

async function person(context, externalID) {
  const { api, container } = context;
  const { json } = await api.get(`/v1/people/${seg(externalID)}`, { signal: context.signal });
  const section = h('section', { 'aria-labelledby': 'person-title' },
    h('h2', { id: 'person-title', text: `Person ${json.external_id}` }),
    fields([['External id', json.external_id], ['Known since', when(json.created_at)],
      ['Devices', String(json.devices.length)]]));
  if (json.devices.length === 0) {
    section.append(h('p', { class: 'empty', text: 'This person has no devices.' }));
  } else {
    section.append(table(`Devices of ${json.external_id}`,
      ['Device', 'Platform', 'State', 'Last registered', 'App version', 'Opted in'],
      json.devices.map((d) => [deviceLink(d), `${d.platform} (${d.environment})`, stateWords(d),
        when(d.last_seen_at), d.app_version || '—', d.opted_in ? 'yes' : 'no'])));
  }
  container.append(section);
}

// MARK: Device page

const REASONS = {
  Unregistered: 'the push service said the app is no longer installed on it',
  BadDeviceToken: 'the push service refused its token',
  Inactive: 'it had not registered for longer than the app\'s inactivity limit',
  Reassigned: 'its token moved to another installation',
  Superseded: 'another device already held its new token',
};

/** Returns one history event as a sentence. */
export function sentence(event) {
  const who = event.external_id ? `person ${event.external_id}` : 'no person';
  const token = event.token_fingerprint ? ` (token fingerprint ${event.token_fingerprint})` : '';
  switch (event.kind) {
    case 'created': return `First registered${event.external_id ? ` for ${who}` : ''}${token}.`;
    case 'registered': return `Registered again with the same token${token}.`;
    case 'token_replaced': return `Its push token was replaced by a new one${token}; the old token no longer reaches it.`;
    case 'moved': return `Moved from person ${event.previous_external_id || '(none)'} to ${who}: the phone changed hands or accounts.`;
    case 'unbound': return `Unbound from person ${event.previous_external_id || '(unknown)'}: it belongs to nobody now.`;
    case 'invalidated': {
      const reason = event.reason ? `${event.reason}: ${REASONS[event.reason] || 'as reported'}` : 'no reason given';
      return `Invalidated (${reason}); it gets no pushes until it registers again.`;
    }
    case 'revalidated': return `Valid again: it registered after being invalidated${token}.`;
    case 'tags_changed': return 'Its tags were changed.';
    case 'opted_in': return 'Opted in to notifications.';
    case 'opted_out': return 'Opted out of notifications.';
    default: return `${event.kind}.`;
  }
}

async function device(context) {
  const { api, container, argument } = context;
  container.append(title(`Device ${argument}`));
  const path = `/v1/devices/${seg(argument)}`;
  const [answer, historyAnswer] = await Promise.all([
    api.get(path, { signal: context.signal }), api.get(`${path}/history`, { signal: context.signal })]);
  const d = answer.json;
  let etag = answer.headers.get('ETag') || `"${d.version}"`;
  const masked = d.token ? `${'•'.repeat(12)}${d.token.slice(-6)}` : '(none)';
  const tokenText = h('code', { id: 'device-token', text: masked });
  const reveal = h('button', {
    type: 'button', 'aria-pressed': 'false', 'aria-controls': 'device-token', text: 'Reveal',
    onclick: () => {
      const shown = reveal.getAttribute('aria-pressed') === 'true';
      tokenText.textContent = shown ? masked : d.token || '(none)';
      reveal.setAttribute('aria-pressed', shown ? 'false' : 'true');
      reveal.textContent = shown ? 'Reveal' : 'Hide';
    },
  });
  container.append(fields([
    ['Id', d.id], ['Person', d.external_id ? h('a', { href: `#/search/${seg(d.external_id)}`, text: d.external_id }) : 'none'],
    ['State', stateWords(d)], ['Platform', `${d.platform} (${d.environment})`], ['Bundle id', d.bundle_id || '—'],
    ['Token', h('span', {}, tokenText, ' ', reveal)], ['Installation id', d.installation_id || '—'],
    ['First registered', when(d.created_at)], ['Last registered', when(d.last_seen_at)],
    ['Person since', when(d.bound_at)], ['App version', d.app_version || '—'], ['Time zone', d.timezone || '—'],
    ['Locale', d.locale || '—'], ['Push permission', d.push_permission == null ? '—' : d.push_permission ? 'yes' : 'no'],
    ['Strikes', String(d.strikes)], ['Version', String(d.version)], ['Mode', d.mode],
  ]));
  const events = historyAnswer.json.events;
  container.append(h('h2', { text: 'History' }), events.length === 0
    ? h('p', { class: 'empty', text: 'No history recorded for this device.' })
    : h('ol', { class: 'timeline', 'aria-label': 'History, newest first' }, events.map((event) => h('li', {},
      h('time', { datetime: event.at, text: when(event.at) }), ' ', h('span', { text: sentence(event) })))));
  const status = h('div', { role: 'status', 'aria-live': 'polite' });
  const tags = h('textarea', { id: 'device-tags', rows: 4, cols: 50, spellcheck: 'false' });
  tags.value = JSON.stringify(d.tags || {}, null, 1);
  const optedIn = h('input', { id: 'device-opted-in', type: 'checkbox' });
  optedIn.checked = Boolean(d.opted_in);
  const save = async (event) => {
    event.preventDefault();
    let wanted;
    try {
      wanted = JSON.parse(tags.value || '{}');
      if (typeof wanted !== 'object' || wanted === null || Array.isArray(wanted)) throw new Error('not an object');
    } catch (_) {
      status.replaceChildren(h('p', { class: 'error', role: 'alert',
        text: 'Tags must be a JSON object, for example {"plan": "pro"}.' }));
      return;
    }
    const changes = { ...wanted };
    for (const name of Object.keys(d.tags || {})) if (!(name in wanted)) changes[name] = null;
    try {
      const saved = await api.request('PATCH', path, { body: { tags: changes, opted_in: optedIn.checked },
        headers: { 'If-Match': etag } });
      etag = saved.headers.get('ETag') || `"${saved.json.version}"`;
      d.tags = saved.json.tags;
      status.replaceChildren(h('p', { class: 'info', text: `Saved: version ${saved.json.version}.` }));
    } catch (error) {
      status.replaceChildren(alert(error));
    }
  };
  const remove = async () => {
    const sure = await confirmDialog(`Delete device ${d.id}? Its history goes with it, and this cannot be undone.`,
      'Delete device');
    if (!sure) return;
    try {
      await api.request('DELETE', path, { headers: { 'If-Match': etag } });
      container.replaceChildren(title(`Device ${d.id}`),
        h('p', { class: 'info', role: 'status', text: `Device ${d.id} was deleted.` }));
    } catch (error) {
      status.replaceChildren(alert(error));
    }
  };
  container.append(h('h2', { text: 'Change' }), h('form', { class: 'device-form', onsubmit: save },
    h('label', { for: 'device-tags', text: 'Tags (JSON object)' }), tags,
    h('span', { class: 'check' }, optedIn, h('label', { for: 'device-opted-in', text: 'Opted in' })),
    h('div', { class: 'actions' }, h('button', { type: 'submit', text: 'Save changes' }),
      h('button', { type: 'button', class: 'danger', text: 'Delete device…', onclick: remove }))), status);
}

// MARK: Changes

const CHANGES_SHOWN_MAX = 200;

async function changes(context) {
  const { api, container } = context;
  container.append(title('Changes'));
  const list = h('ol', { id: 'changes-list', class: 'changes', 'aria-label': 'Changes, newest first' });
  const state = h('p', { id: 'changes-state', role: 'status', text: 'Reading the change feed…' });
  let paused = false;
  let inner = null;
  const toggle = h('button', {
    type: 'button', 'aria-pressed': 'false', text: 'Pause',
    onclick: () => {
      paused = !paused;
      toggle.setAttribute('aria-pressed', String(paused));
      toggle.textContent = paused ? 'Resume' : 'Pause';
      if (paused && inner) inner.abort();
      if (!paused) loop();
    },
  });
  const empty = h('p', { class: 'empty', text: 'No change yet: new registrations and deletions appear here as they commit.' });
  container.append(h('div', { class: 'actions' }, toggle), state, empty, list);
  let cursor = null;
  let running = false;
  const show = (change) => {
    empty.remove();
    const text = change.op === 'delete' ? `Deleted device ${change.id}.`
      : `${change.device.id}: ${change.device.platform}, ${change.device.external_id ? `person ${change.device.external_id}` : 'no person'}, ${stateWords(change.device)}.`;
    const item = h('li', {}, h('time', { datetime: change.at, text: when(change.at) }), ' ',
      change.op === 'delete' ? h('span', { text }) : h('a', { href: `#/device/${seg(change.device.id)}`, text }));
    list.prepend(item);
    while (list.children.length > CHANGES_SHOWN_MAX) list.lastChild.remove();
  };
  const loop = async () => {
    if (running) return;
    running = true;
    try {
      // Catch up without waiting (the last page shown), then wait for new changes.
      let catchingUp = cursor === null;
      while (!paused && !context.signal.aborted) {
        inner = new AbortController();
        const stop = () => inner.abort();
        context.signal.addEventListener('abort', stop, { once: true });
        const query = `limit=1000&wait_ms=${catchingUp ? 0 : 25000}${cursor ? `&after=${seg(cursor)}` : ''}`;
        let page;
        try {
          page = (await api.get(`/v1/changes?${query}`, { signal: inner.signal })).json;
        } finally {
          context.signal.removeEventListener('abort', stop);
        }
        page.changes.slice(-CHANGES_SHOWN_MAX).forEach(show);
        cursor = page.next_cursor || cursor;
        if (catchingUp && page.changes.length === 0) catchingUp = false;
        state.textContent = catchingUp ? 'Reading the change feed…' : 'Live: waiting for changes.';
      }
      if (paused) state.textContent = 'Paused. Resume to catch up and follow again.';
    } catch (error) {
      if (error.name === 'AbortError') {
        if (paused) state.textContent = 'Paused. Resume to catch up and follow again.';
      } else {
        state.textContent = 'Stopped.';
        container.append(alert(error));
      }
    } finally {
      running = false;
    }
  };
  loop();
}

// MARK: Inactivity

async function inactivity(context) {
  const { api, container } = context;
  container.append(title('Inactivity'),
    h('p', { text: 'A device that has not registered for this many days can be invalidated: it then gets no '
      + 'pushes until it registers again. The preview changes nothing.' }));
  const days = h('input', { id: 'inactive-days', type: 'number', min: 1, max: 3650, required: true, value: 90 });
  const result = h('div', { id: 'inactive-result' });
  const preview = async (event) => {
    if (event) event.preventDefault();
    const n = Number(days.value);
    result.replaceChildren(h('p', { role: 'status', text: 'Counting…' }));
    try {
      const { json } = await api.get(`/v1/devices/inactive?older_than_days=${n}&limit=50`, { signal: context.signal });
      const parts = [h('p', { role: 'status', id: 'inactive-count',
        text: `${count(json.count)} device${json.count === 1 ? '' : 's'} of ${modeName(context.session)} `
          + `${json.count === 1 ? 'has' : 'have'} not registered for more than ${n} days.` })];
      if (json.count > 0) {
        parts.push(table(`The oldest ${json.devices.length} of them`, ['Device', 'Person', 'Platform', 'Last registered'],
          json.devices.map((d) => [deviceLink(d), d.external_id || 'none', d.platform, when(d.last_seen_at)])));
        parts.push(h('button', {
          type: 'button', class: 'danger', text: `Invalidate ${count(json.count)} device${json.count === 1 ? '' : 's'}…`,
          onclick: async () => {
            const sure = await confirmDialog(`Invalidate ${count(json.count)} device${json.count === 1 ? '' : 's'} `
              + `not registered for more than ${n} days? They get no pushes until they register again.`,
            `Invalidate ${count(json.count)}`);
            if (!sure) return;
            try {
              const done = await api.request('POST', '/v1/devices/inactive/invalidate', { body: { older_than_days: n } });
              result.replaceChildren(h('p', { class: 'info', role: 'status',
                text: `${count(done.json.invalidated)} device${done.json.invalidated === 1 ? '' : 's'} invalidated.` }));
            } catch (error) {
              result.append(alert(error));
            }
          },
        }));
      } else {
        parts.push(h('p', { class: 'empty', text: 'Nothing to invalidate.' }));
      }
      result.replaceChildren(...parts);
    } catch (error) {
      if (error.name !== 'AbortError') result.replaceChildren(alert(error));
    }
  };
  container.append(h('form', { class: 'inline-form', onsubmit: preview },
    h('label', { for: 'inactive-days', text: 'Not registered for more than (days)' }), days,
    h('button', { type: 'submit', text: 'Preview' })), result);
  await preview();
}

// MARK: Metrics (operator)

/** Returns the samples of a Prometheus text exposition: [{name, labels, value}]. */
export function parseExposition(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match) continue;
    const labels = {};
    if (match[3]) for (const pair of match[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    samples.push({ name: match[1], labels, value: Number(match[4]) });
  }
  return samples;
}

/** Returns cumulative bucket counts by `le`, summed over every other label. */
function buckets(samples, family) {
  const byBound = new Map();
  for (const s of samples) {
    if (s.name !== `${family}_bucket`) continue;
    const bound = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
    byBound.set(bound, (byBound.get(bound) || 0) + s.value);
  }
  return byBound;
}

/** Returns the upper bound of the bucket holding quantile q of (after − before), or null. */
function quantile(after, before, q) {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const total = (after.get(Infinity) || 0) - ((before && before.get(Infinity)) || 0);
  if (total <= 0) return null;
  for (const bound of bounds) {
    const seen = after.get(bound) - ((before && before.get(bound)) || 0);
    if (seen >= q * total) return bound;
  }
  return Infinity;
}

function sum(samples, name) {
  return samples.filter((s) => s.name === name).reduce((a, s) => a + s.value, 0);
}

function latency(bound) {
  if (bound === null) return 'no requests yet';
  if (bound === Infinity) return 'over the largest bucket';
  return bound < 1 ? `≤ ${(bound * 1000).toFixed(bound < 0.001 ? 2 : 1)} ms` : `≤ ${bound} s`;
}

async function metrics(context) {
  const { api, container, signal } = context;
  container.append(title('Metrics'), h('p', { text: 'Read from GET /metrics one second after opening, then every '
    + '5 seconds while this view is open. Latencies are the upper bound of the histogram bucket that holds the 99th '
    + 'percentile.' }));
  const body = h('div', { id: 'metrics-body' });
  container.append(body);
  const rates = [];
  let previous = null;
  const read = async () => {
    const { text } = await api.get('/metrics', { signal, text: true });
    const now = performance.now();
    const samples = parseExposition(text);
    const reading = {
      at: now, requests: sum(samples, 'roost_http_requests_total'),
      http: buckets(samples, 'roost_http_request_duration_seconds'),
      fsync: buckets(samples, 'roost_wal_fsync_duration_seconds'),
    };
    let rate = null;
    if (previous) {
      rate = ((reading.requests - previous.requests) * 1000) / (reading.at - previous.at);
      rates.push(rate);
      if (rates.length > 60) rates.shift();
    }
    const pending = 'from the next reading';
    body.replaceChildren(
      fields([
        ['Requests per second', rate === null ? pending : rate.toFixed(2)],
        ['p99 request latency, since the last reading', previous ? latency(quantile(reading.http, previous.http, 0.99)) : pending],
        ['p99 request latency since start', latency(quantile(reading.http, null, 0.99))],
        ['p99 WAL fsync latency, since the last reading', previous ? latency(quantile(reading.fsync, previous.fsync, 0.99)) : pending],
        ['p99 WAL fsync latency since start', latency(quantile(reading.fsync, null, 0.99))],
        ['Requests since start', count(reading.requests)],
      ]),
      sparkline('Requests per second', rates, 'requests/s'));
    previous = reading;
  };
  const again = () => read().catch((error) => {
    if (error.name !== 'AbortError') body.append(alert(error));
  });
  await read();
  let timer = setTimeout(() => {
    again();
    timer = setInterval(again, 5000);
  }, 1000);
  signal.addEventListener('abort', () => {
    clearTimeout(timer);
    clearInterval(timer);
  }, { once: true });
}

// MARK: Cluster (spec §13, only when GET /v1/cluster answers 200)

async function cluster(context) {
  const { api, container } = context;
  container.append(title('Cluster'));
  const { json } = await api.get('/v1/cluster', { signal: context.signal });
  container.append(fields([['Cluster', json.cluster], ['This node', `${json.node} (${json.role})`],
    ['Epoch', String(json.epoch)], ['Leader', json.leader ? `${json.leader.node} at ${json.leader.url}` : 'none'],
    ['Position', json.position], ['Committed position', json.committed_position], ['Lag', `${json.lag_ms} ms`]]),
  table('Members', ['Node', 'URL', 'Role', 'Position', 'Checkpoint', 'Last seen'],
    (json.members || []).map((m) => [m.node, m.url, m.role, m.position, m.checkpoint_position,
      `${m.seen_ms_ago} ms ago`])));
}

export const views = { apps, overview, search, device, changes, inactivity, metrics, cluster };
