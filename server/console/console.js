// decide console: a client of decide's public HTTP API, nothing more.
//
// Every figure on the page comes from an API call made with the key typed in (or none), so
// the console can do nothing the API would refuse that key. Keys live in this page's memory,
// and in sessionStorage (this tab only, gone when it closes) when the person asks for it.
// The question types come from MCP's tools/list on /mcp, which describes each type from its
// plugin's own info and example; the playground asks through MCP's tools/call of the type's
// tool, which answers every type (built-in or uploaded, either wire format) in one shape:
// the answer fields, the calibrated probabilities over the options and the audit block.
'use strict';

(() => {
  const SVG = 'http://www.w3.org/2000/svg';
  const state = {
    apiKey: '', adminKey: '', model: null, health: null, types: [], type: null,
    question: null, admin: false, tenants: [], tenantId: null, usage: [], timers: [],
  };
  const $ = (id) => document.getElementById(id);

  /** An element with attributes (`text` sets its text, `on*` functions its listeners). */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'text') node.textContent = value;
      else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? '' : value);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }
  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (name === 'text') node.textContent = value;
      else node.setAttribute(name, value);
    }
    node.append(...children);
    return node;
  }
  const clear = (node) => { node.replaceChildren(); return node; };
  const pct = (p) => `${(100 * p).toFixed(1)}%`;
  const num = (x, digits = 3) => (typeof x === 'number' ? x.toFixed(digits) : String(x));
  const when = (s) => (s ? new Date(s * 1000).toISOString().replace('T', ' ').slice(0, 19) : '');
  const show = (node, visible) => { node.hidden = !visible; };

  // ---- the API ----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, what) {
      super(`${what}: ${status} ${message}`);
      this.status = status;
    }
  }

  /** The message of any of decide's error shapes (OpenAI's, Jev's two), else the text. */
  function errorMessage(data, text) {
    if (data && typeof data === 'object') {
      if (data.error && data.error.message) return data.error.message;
      if (data.detail) {
        if (Array.isArray(data.detail) && data.detail[0]) return data.detail[0].msg;
        if (data.detail.message) return data.detail.message;
      }
    }
    return text || '(no body)';
  }

  /** One API call. `key` is 'api', 'admin' or 'none'; a JSON body is sent as JSON. */
  async function api(method, path, { key = 'api', body, type } = {}) {
    const headers = {};
    const secret = key === 'admin' ? state.adminKey : key === 'api' ? state.apiKey : '';
    if (secret) headers.Authorization = `Bearer ${secret}`;
    let payload = body;
    if (body !== undefined && !(body instanceof Blob) && typeof body !== 'string') {
      payload = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    }
    if (type) headers['Content-Type'] = type;
    if (path === '/mcp') headers.Accept = 'application/json, text/event-stream';
    const response = await fetch(path, {
      method, headers, body: payload, cache: 'no-store', credentials: 'omit',
    });
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
    if (!response.ok) throw new ApiError(response.status, errorMessage(data, text), `${method} ${path}`);
    return { data, headers: response.headers };
  }

  /** An MCP request (stateless streamable HTTP: one JSON-RPC call, a JSON answer). */
  async function mcp(method, params) {
    const { data } = await api('POST', '/mcp', {
      body: { jsonrpc: '2.0', id: Date.now(), method, params },
    });
    if (data.error) throw new ApiError(data.error.code, data.error.message, `MCP ${method}`);
    return data.result;
  }

  function showError(error) {
    const box = $('error');
    box.textContent = error instanceof Error ? error.message : String(error);
    box.hidden = false;
  }
  function clearError() { $('error').hidden = true; }
  function setStatus(text) { $('status').textContent = text; }
  /** Runs `work`, showing what went wrong; returns its value or undefined. */
  async function guarded(work) {
    try { return await work(); } catch (error) { showError(error); return undefined; }
  }

  // ---- keys and connecting -----------------------------------------------------------------

  function loadKeys() {
    const saved = sessionStorage.getItem('decide-console-keys');
    if (!saved) return;
    try {
      const keys = JSON.parse(saved);
      $('api-key').value = keys.api || '';
      $('admin-key').value = keys.admin || '';
      $('remember').checked = true;
    } catch (_) { sessionStorage.removeItem('decide-console-keys'); }
  }

  /** Forgets what the previous keys showed, so nothing read with them stays on the page. */
  function resetViews() {
    state.tenants = [];
    state.tenantId = null;
    state.usage = [];
    for (const id of ['plugins', 'tenants', 'keys-table', 'reliability-table']) clear($(id).querySelector('tbody'));
    for (const id of ['calibration-status', 'usage', 'usage-chart', 'model', 'queue']) clear($(id));
    for (const id of ['metrics', 'tenant-limits']) $(id).textContent = '';
    for (const id of ['versions', 'reliability', 'new-key', 'limits-form', 'result-body']) $(id).hidden = true;
    $('result-empty').hidden = false;
    for (const pre of document.querySelectorAll('.snippet pre')) pre.textContent = '';
  }

  async function connect() {
    clearError();
    resetViews();
    state.apiKey = $('api-key').value.trim();
    state.adminKey = $('admin-key').value.trim();
    if ($('remember').checked) {
      sessionStorage.setItem('decide-console-keys', JSON.stringify({ api: state.apiKey, admin: state.adminKey }));
    } else {
      sessionStorage.removeItem('decide-console-keys');
    }
    setStatus('Connecting…');
    state.health = (await api('GET', '/health', { key: 'none' }).catch((e) => ({ data: { status: `unavailable (${e.message})` } }))).data;
    const models = await guarded(() => api('GET', '/v1/models', { key: 'none' }));
    state.model = models ? models.data.data[0].id : null;
    state.admin = false;
    if (state.adminKey) {
      const tenants = await guarded(() => api('GET', '/admin/v1/tenants', { key: 'admin' }));
      if (tenants) { state.admin = true; state.tenants = tenants.data.tenants; }
    }
    let tools;
    try {
      tools = await mcp('tools/list', {});
    } catch (error) {
      renderTypes([]);
      if (error.status === 401 && !state.apiKey) {
        setStatus(`This server needs a key: enter one above. Server: ${state.health.status}.`);
      } else {
        showError(error);
        setStatus(`Not connected: ${error.status === 401 ? 'the API key was refused' : 'the server did not list the question types'}. Server: ${state.health.status}.`);
      }
      refreshView();
      return;
    }
    renderTypes(tools.tools);
    await findTenant();
    setStatus(`Connected to ${state.model || 'decide'} (${state.health.status}); ${state.types.length} question types; `
      + `${state.apiKey ? 'API key accepted' : 'no API key'}${state.admin ? '; admin key accepted' : ''}.`);
    refreshView();
  }

  /** The tenant of the API key, for the admin API: the tenant one of whose keys begins
   * with the typed key's prefix (the admin API lists keys by their prefix only). */
  async function findTenant() {
    state.tenantId = null;
    if (!state.admin || !state.apiKey.startsWith('dk_')) return;
    for (const tenant of state.tenants) {
      const keys = await guarded(() => api('GET', `/admin/v1/tenants/${tenant.id}/keys`, { key: 'admin' }));
      if (keys && keys.data.keys.some((k) => !k.revoked_at && state.apiKey.startsWith(k.prefix))) {
        state.tenantId = tenant.id;
        return;
      }
    }
  }

  // ---- tabs --------------------------------------------------------------------------------

  /** ARIA tabs: click or arrow keys, Home and End; `onselect(panelId)` after a switch. */
  function setupTabs(list, onselect) {
    const tabs = [...list.querySelectorAll('[role="tab"]')];
    const select = (tab, focus) => {
      for (const other of tabs) {
        const selected = other === tab;
        other.setAttribute('aria-selected', String(selected));
        other.tabIndex = selected ? 0 : -1;
        $(other.getAttribute('aria-controls')).hidden = !selected;
      }
      if (focus) tab.focus();
      if (onselect) onselect(tab.getAttribute('aria-controls'));
    };
    tabs.forEach((tab, i) => {
      tab.addEventListener('click', () => select(tab, false));
      tab.addEventListener('keydown', (event) => {
        const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[event.key];
        if (next === undefined) return;
        event.preventDefault();
        select(tabs[(next + tabs.length) % tabs.length], true);
      });
    });
    return (id) => select(tabs.find((t) => t.getAttribute('aria-controls') === id), false);
  }

  // ---- playground: the types and their forms ----------------------------------------------

  /** Question types from MCP tools: every tool but `decide` and `classify` is one. */
  function renderTypes(tools) {
    state.types = tools
      .filter((t) => /^(openai|systemone)-./.test(t.name))
      .map((t) => {
        const question = (t.inputSchema.properties || {}).question || {};
        return {
          name: t.name,
          kind: t.name.replace(/^(openai|systemone)-/, ''),
          format: t.name.startsWith('openai-') ? 'openai' : 'systemone',
          description: t.description.split(' Asks one ')[0],
          example: (question.examples || [])[0],
        };
      });
    const select = clear($('qtype'));
    for (const type of state.types) {
      select.append(el('option', { value: type.name, text: `${type.name} — ${type.description}` }));
    }
    const keep = state.type && state.types.find((t) => t.name === state.type.name);
    if (keep) select.value = keep.name;
    chooseType(select.value);
  }

  function chooseType(name) {
    state.type = state.types.find((t) => t.name === name) || null;
    if (!state.type) {
      clear($('question-form')).append(el('legend', { text: 'Question' }),
        el('p', { class: 'muted', text: 'Connect to list the question types.' }));
      return;
    }
    state.question = structuredClone(state.type.example || { type: state.type.kind, instructions: '' });
    renderForm();
  }

  function getAt(path) { return path.reduce((v, k) => v[k], state.question); }
  function setAt(path, value) {
    const parent = getAt(path.slice(0, -1));
    parent[path[path.length - 1]] = value;
    syncJson();
  }
  function syncJson() {
    $('question-json').value = JSON.stringify(state.question, null, 2);
    renderSnippets();
  }
  /** A value of the same shape as `v` with its text emptied: what "Add" appends. */
  function blankLike(v) {
    if (Array.isArray(v)) return [];
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, blankLike(x)]));
    if (typeof v === 'number') return 0;
    if (typeof v === 'boolean') return false;
    return v === null ? null : '';
  }
  let fieldIds = 0;

  /** The question's form, generated from the example's own shape. */
  function renderForm() {
    const form = clear($('question-form'));
    form.append(el('legend', { text: `Question (${state.type.name})` }));
    form.append(el('p', { class: 'muted', text: `${state.type.description} Fields from the plugin's example.` }));
    for (const [key, value] of Object.entries(state.question)) {
      if (key === 'type') continue;
      form.append(fieldFor([key], key, value, false));
    }
    syncJson();
  }

  /** An input (or a group of them) for the value at `path`. An object under a key whose
   * values are all text or null is a map (labels and their descriptions, as Jev's
   * `criteria`): its keys are editable too. Arrays get Add and Remove. */
  function fieldFor(path, label, value, inList) {
    const id = `q-${++fieldIds}`;
    if (Array.isArray(value)) {
      const group = el('fieldset', {}, el('legend', { text: label }));
      value.forEach((item, i) => {
        const row = el('div', { class: 'row' }, fieldFor(path.concat(i), `${label} ${i + 1}`, item, true));
        row.append(el('button', {
          type: 'button', class: 'small danger', text: 'Remove', 'aria-label': `Remove ${label} ${i + 1}`,
          onclick: () => { getAt(path).splice(i, 1); renderForm(); },
        }));
        group.append(row);
      });
      group.append(el('button', {
        type: 'button', class: 'small', text: `Add to ${label}`,
        onclick: () => {
          const list = getAt(path);
          list.push(list.length ? blankLike(list[list.length - 1]) : '');
          renderForm();
        },
      }));
      return group;
    }
    if (value && typeof value === 'object') {
      const isMap = !inList && Object.values(value).every((v) => v === null || typeof v === 'string');
      const group = el('fieldset', {}, el('legend', { text: label }));
      if (isMap) {
        Object.entries(value).forEach(([key, text], i) => {
          const keyInput = el('input', { type: 'text', class: 'key', value: key, 'aria-label': `${label}: label ${i + 1}` });
          const textInput = el('input', {
            type: 'text', value: text ?? '', placeholder: '(no description)', 'aria-label': `${label}: description of label ${i + 1}`,
          });
          keyInput.addEventListener('change', () => {
            const entries = Object.entries(getAt(path)).map(([k, v]) => (k === key ? [keyInput.value, v] : [k, v]));
            setAt(path, Object.fromEntries(entries));
            renderForm();
          });
          textInput.addEventListener('input', () => {
            getAt(path)[key] = textInput.value === '' ? null : textInput.value;
            syncJson();
          });
          group.append(el('div', { class: 'row' }, keyInput, textInput, el('button', {
            type: 'button', class: 'small danger', text: 'Remove', 'aria-label': `Remove ${label} label ${i + 1}`,
            onclick: () => { delete getAt(path)[key]; renderForm(); },
          })));
        });
        group.append(el('button', {
          type: 'button', class: 'small', text: `Add to ${label}`,
          onclick: () => {
            const map = getAt(path);
            let n = Object.keys(map).length + 1;
            while (`option${n}` in map) n += 1;
            map[`option${n}`] = null;
            renderForm();
          },
        }));
      } else {
        for (const [key, item] of Object.entries(value)) group.append(fieldFor(path.concat(key), key, item, false));
      }
      return group;
    }
    if (typeof value === 'boolean') {
      const box = el('input', { id, type: 'checkbox', checked: value, onchange: () => setAt(path, box.checked) });
      return el('div', { class: 'field check' }, box, el('label', { for: id, text: label }));
    }
    const input = el('input', {
      id, type: typeof value === 'number' ? 'number' : 'text', value: value ?? '',
      oninput: () => setAt(path, typeof value === 'number' ? Number(input.value) : input.value),
    });
    return el('div', { class: 'field' }, el('label', { for: id, text: label }), input);
  }

  /** The question as sent: empty optional text left out (an emptied description is gone,
   * not ""), map descriptions emptied to null. */
  function prune(value, inMap) {
    if (Array.isArray(value)) return value.map((v) => prune(v, false));
    if (value && typeof value === 'object') {
      const out = {};
      for (const [k, v] of Object.entries(value)) {
        if (v === '' && !inMap) continue;
        const isMap = v && typeof v === 'object' && !Array.isArray(v)
          && Object.values(v).every((x) => x === null || typeof x === 'string');
        out[k] = prune(v, isMap);
      }
      return out;
    }
    return value === '' && inMap ? null : value;
  }

  // ---- playground: asking ------------------------------------------------------------------

  function toolArguments() {
    return { state: $('input').value, question: prune(state.question), return_prompt: true };
  }

  async function ask() {
    clearError();
    if (!state.type) { showError('Connect first: the question types come from the server.'); return; }
    const button = $('ask');
    button.disabled = true;
    button.textContent = 'Asking…';
    try {
      const result = await mcp('tools/call', { name: state.type.name, arguments: toolArguments() });
      const content = result.structuredContent || {};
      if (result.isError) {
        const detail = content.detail;
        const message = (Array.isArray(detail) && detail[0] && detail[0].msg)
          || (detail && detail.message) || (result.content && result.content[0] && result.content[0].text);
        throw new ApiError(content.status || 'error', message, `${state.type.name}`);
      }
      renderAnswer(content);
    } catch (error) {
      showError(error);
    } finally {
      button.disabled = false;
      button.textContent = 'Ask';
    }
  }

  /** The label a probability's key stands for: a score's index names a level. */
  function optionLabel(key, answer) {
    if (answer.legend && key in answer.legend) {
      const level = answer.legend[key];
      return typeof level === 'string' ? level : JSON.stringify(level);
    }
    if (Array.isArray(answer.probabilities)) {
      const entry = answer.probabilities.find((p) => String(p.value) === key);
      if (entry && entry.label !== undefined) return String(entry.label);
    }
    return key;
  }

  function renderAnswer(result) {
    show($('result-empty'), false);
    show($('result-body'), true);
    const format = state.type.format === 'openai' ? 'POST /v1/decisions' : 'POST /v1/systemone';
    $('sent-as').textContent = `Asked through MCP tools/call ${state.type.name} (the same read as ${format}; see "The same request").`;
    const answer = result.answer || {};
    const entries = Object.entries(result.probabilities || {});
    const best = Math.max(...entries.map(([, p]) => p));
    const bars = clear($('bars'));
    for (const [key, p] of entries) {
      const label = optionLabel(key, answer);
      const fill = el('div', { class: 'fill' });
      fill.style.width = pct(p);
      bars.append(el('li', { class: p === best ? 'top' : null },
        el('span', { class: 'label', title: label, text: label }),
        el('div', {
          class: 'track', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '1',
          'aria-valuenow': p.toFixed(4), 'aria-label': `${label}: ${pct(p)}`,
        }, fill),
        el('span', { class: 'value', text: pct(p) })));
    }
    const audit = result.audit || {};
    const mass = clear($('mass'));
    if (typeof audit.option_mass === 'number') {
      const fill = el('div', { class: 'fill' });
      fill.style.width = pct(audit.option_mass);
      mass.append(
        el('div', { text: `Option mass ${pct(audit.option_mass)}: the share of the model's next-token probability that fell on the option labels (the bars are renormalised over them).` }),
        el('div', {
          class: 'track', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '1',
          'aria-valuenow': audit.option_mass.toFixed(4), 'aria-label': `Option mass ${pct(audit.option_mass)}`,
        }, fill));
    }
    $('answer-json').textContent = JSON.stringify(answer, null, 2);
    const list = clear($('audit'));
    for (const [key, value] of Object.entries(audit)) {
      list.append(el('dt', { text: key }), el('dd', { text: typeof value === 'object' ? JSON.stringify(value) : String(value) }));
    }
    if (result.usage) {
      list.append(el('dt', { text: 'usage' }), el('dd', { text: JSON.stringify(result.usage) }));
    }
    const reads = (result.prompt && result.prompt.reads) || [];
    $('prompt').textContent = reads.map((read, i) => `--- read ${i + 1} of ${reads.length} (labels ${(read.labels || []).join(', ')}; ${read.token_ids ? read.token_ids.length : '?'} tokens)\n${read.text}`).join('\n');
  }

  // ---- the same request, four ways --------------------------------------------------------

  /** JSON as a Python literal. */
  function py(value, indent = '') {
    const inner = `${indent}    `;
    if (value === null) return 'None';
    if (value === true) return 'True';
    if (value === false) return 'False';
    if (typeof value === 'string') return JSON.stringify(value);
    if (typeof value === 'number') return String(value);
    if (Array.isArray(value)) {
      if (!value.length) return '[]';
      return `[\n${value.map((v) => inner + py(v, inner)).join(',\n')},\n${indent}]`;
    }
    const entries = Object.entries(value);
    if (!entries.length) return '{}';
    return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${py(v, inner)}`).join(',\n')},\n${indent}}`;
  }
  const shellQuote = (text) => `'${text.replace(/'/g, "'\\''")}'`;

  function renderSnippets() {
    if (!state.type) return;
    const base = window.location.origin;
    const input = $('input').value;
    const question = prune(state.question);
    const model = state.model || 'decide';
    const openai = state.type.format === 'openai';
    const header = '# export DECIDE_KEY=...   (the key you typed above; never pasted into the snippet)\n';
    const httpBody = openai
      ? { model, input, questions: [question], extra: { return_prompt: true } }
      : { state: input, questions: { q: question }, return_prompt: true };
    const path = openai ? '/v1/decisions' : '/v1/systemone';
    const curl = `${header}curl -s ${base}${path} \\\n  -H "Authorization: Bearer $DECIDE_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify(httpBody, null, 2))}`;
    const otherFormat = (sdk, twin) => `# ${sdk}\n# ${state.type.name} is asked in ${openai ? "OpenAI's Decisions format (/v1/decisions)" : "TypeSafe's Jev format (/v1/systemone)"};\n# ${twin}`;
    const openaiCode = openai
      ? `import os\n\nimport openai\n\nclient = openai.OpenAI(base_url=${JSON.stringify(`${base}/v1`)}, api_key=os.environ.get("DECIDE_KEY", "unused"))\ndecision = client.decisions.create(\n    model=${JSON.stringify(model)},\n    input=${JSON.stringify(input)},\n    questions=[${py(question, '    ')}],\n    extra_body={"extra": {"return_prompt": True}},\n)\nprint(decision.answers[0])`
      : otherFormat("openai's client (client.decisions.create) speaks OpenAI's Decisions format.", `use typesafe-sdk, or the openai-${state.type.kind} type if the server has it.`);
    const typesafe = openai
      ? otherFormat("typesafe-sdk (client.system_one) speaks TypeSafe's Jev format.", `use the openai client, or the systemone-${state.type.kind} type if the server has it.`)
      : `import os\n\nfrom typesafe_sdk import TypeSafeClient\n\nwith TypeSafeClient(api_key=os.environ.get("DECIDE_KEY", "unused"), base_url=${JSON.stringify(base)}) as client:\n    result = client.system_one(\n        state=${JSON.stringify(input)},\n        questions={"q": ${py(question, '        ')}},\n    )\nprint(result.answers["q"])`;
    const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: state.type.name, arguments: { state: input, question, return_prompt: true } } };
    const mcpCode = `${header}# MCP over streamable HTTP (stateless: no session, one JSON answer); \`decide mcp\` serves the same tools over stdio.\ncurl -s ${base}/mcp \\\n  -H "Authorization: Bearer $DECIDE_KEY" \\\n  -H "Content-Type: application/json" \\\n  -H "Accept: application/json, text/event-stream" \\\n  -d ${shellQuote(JSON.stringify(call, null, 2))}`;
    const code = { 'snip-curl': curl, 'snip-openai': openaiCode, 'snip-typesafe': typesafe, 'snip-mcp': mcpCode };
    for (const [id, text] of Object.entries(code)) $(id).querySelector('pre').textContent = text;
  }

  async function copy(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      // Not a secure context (plain HTTP off loopback): the old way.
      const area = el('textarea', { class: 'visually-hidden' });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand('copy');
      area.remove();
    }
    button.textContent = 'Copied';
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  }

  // ---- tenant view -------------------------------------------------------------------------

  async function refreshTenant() {
    await Promise.all([refreshPlugins(), refreshCalibration(), refreshTasks(), refreshTenantAdmin()]);
  }

  async function refreshPlugins() {
    const body = $('plugins').querySelector('tbody');
    const listed = await guarded(() => api('GET', '/v1/plugins'));
    if (!listed) return;
    clear(body);
    for (const plugin of listed.data.plugins) {
      const actions = el('td');
      if (plugin.source === 'tenant') {
        actions.append(
          el('button', { type: 'button', class: 'small', text: 'Versions', onclick: () => showVersions(plugin.name) }), ' ',
          el('button', {
            type: 'button', class: 'small danger', text: 'Remove', 'aria-label': `Remove ${plugin.name}`,
            onclick: () => guarded(async () => {
              await api('DELETE', `/v1/plugins/${encodeURIComponent(plugin.name)}`);
              setStatus(`Removed ${plugin.name}; the server's plugin of that name (if any) serves again.`);
              await refreshPlugins();
              await connectTypesOnly();
            }),
          }));
      }
      body.append(el('tr', {},
        el('td', {}, el('code', { text: plugin.name })),
        el('td', { text: plugin.kind }),
        el('td', { text: plugin.version + (plugin.upload_version ? ` (upload v${plugin.upload_version})` : '') }),
        el('td', {}, el('span', { class: `badge ${plugin.source}`, text: plugin.source })),
        el('td', {}, el('code', { title: plugin.sha256, text: plugin.sha256.slice(0, 12) })),
        actions));
    }
  }

  async function showVersions(name) {
    const listed = await guarded(() => api('GET', `/v1/plugins/${encodeURIComponent(name)}/versions`));
    if (!listed) return;
    const box = $('versions');
    $('versions-title').textContent = `Versions of ${name}`;
    const body = clear(box.querySelector('tbody'));
    for (const v of listed.data.versions) {
      body.append(el('tr', {},
        el('td', { class: 'num', text: String(v.version) }),
        el('td', { text: v.plugin_version }),
        el('td', { class: 'num', text: `${v.size} B` }),
        el('td', { text: when(v.created_at) }),
        el('td', {}, v.active ? el('span', { class: 'badge good', text: 'serving' }) : ''),
        el('td', {}, v.active ? '' : el('button', {
          type: 'button', class: 'small', text: `Roll back to v${v.version}`,
          onclick: () => guarded(async () => {
            await api('POST', `/v1/plugins/${encodeURIComponent(name)}/rollback`, { body: { version: v.version } });
            setStatus(`${name} serves version ${v.version} again.`);
            await refreshPlugins();
            await showVersions(name);
          }),
        }))));
    }
    box.hidden = false;
  }

  async function upload() {
    clearError();
    const name = $('plugin-name').value.trim();
    const file = $('plugin-file').files[0];
    if (!name || !file) { showError('Name the plugin and choose its .wasm file.'); return; }
    const done = await guarded(() => api('PUT', `/v1/plugins/${encodeURIComponent(name)}`, { body: file, type: 'application/wasm' }));
    if (!done) return;
    const p = done.data;
    setStatus(`Uploaded ${p.name}: ${p.kind} ${p.plugin_version}, stored as version ${p.version} (contract ${p.contract_version}).`);
    await refreshPlugins();
    await connectTypesOnly();
  }

  /** Lists the question types again (after an upload or removal). */
  async function connectTypesOnly() {
    const tools = await guarded(() => mcp('tools/list', {}));
    if (tools) renderTypes(tools.tools);
  }

  async function refreshCalibration() {
    const box = clear($('calibration-status'));
    let status;
    try {
      status = (await api('GET', '/v1/calibration')).data;
    } catch (error) {
      box.append(el('p', { class: 'muted', text: error.status === 403 || error.status === 401
        ? `A tenant's own calibration needs a tenant's key (${error.message}). Answers use the server's calibration: ${describeServerCalibration()}.`
        : error.message }));
      show($('reliability'), false);
      return;
    }
    const progress = status.progress;
    box.append(el('p', {}, 'Status: ', el('span', { class: `badge ${status.status === 'done' ? 'good' : status.status === 'failed' ? 'bad' : ''}`, text: status.status })));
    if (progress) {
      box.append(el('div', { class: 'meter' },
        el('label', { for: 'calibration-progress', text: `Questions read: ${progress.answered} of ${progress.total}` }),
        el('progress', { id: 'calibration-progress', max: String(progress.total || 1), value: String(progress.answered) })));
      if (progress.error) box.append(el('p', { class: 'error', text: progress.error }));
    }
    if (status.status === 'running') {
      later(refreshCalibration, 2000);
    }
    const fit = status.result;
    if (!fit) {
      show($('reliability'), false);
      if (status.status === 'none') box.append(el('p', { class: 'muted', text: `No calibration of this tenant's own: answers use the server's (${describeServerCalibration()}).` }));
      return;
    }
    const facts = el('dl', { class: 'audit' });
    const add = (k, v) => facts.append(el('dt', { text: k }), el('dd', { text: v }));
    add('policy', fit.policy);
    add('kept', fit.kept ? 'yes: answers use the fitted parameters' : 'no: answers use T = 1.0');
    add('reason', fit.reason);
    add('parameters', JSON.stringify(fit.params));
    add('ECE raw', interval(fit.ece_raw));
    add('ECE corrected (held out)', fit.ece_calibrated ? interval(fit.ece_calibrated) : 'n/a');
    add('accuracy (raw)', pct(fit.accuracy_raw));
    add('questions used / skipped', `${fit.used} / ${fit.skipped}`);
    add('model', fit.model);
    add('fitted', when(fit.fitted_at));
    box.append(facts);
    renderReliability(fit);
  }
  const interval = (i) => `${num(i.value)} [${num(i.low)}, ${num(i.high)}]`;
  function describeServerCalibration() {
    const c = state.health && state.health.calibration;
    return c ? `${c.policy}, T = ${num(c.temperature, 2)}, source ${c.source}` : 'see the operator view';
  }

  /** The reliability diagram: confidence against accuracy per bin, raw and corrected. */
  function renderReliability(fit) {
    const figure = $('reliability');
    const raw = fit.reliability_raw || [];
    const corrected = fit.reliability_calibrated || [];
    if (!raw.length) {
      figure.hidden = true;
      $('calibration-status').append(el('p', { class: 'muted', text: 'This fit was stored before per-bin data was kept: fit again to see its reliability diagram.' }));
      return;
    }
    figure.hidden = false;
    const size = 420;
    const pad = 44;
    const span = size - pad - 14;
    const x = (v) => pad + v * span;
    const y = (v) => size - pad - v * span;
    const chart = svg('svg', { viewBox: `0 0 ${size} ${size}`, width: String(size), height: String(size), role: 'img', 'aria-labelledby': 'rel-title rel-desc' });
    chart.append(svg('title', { id: 'rel-title', text: 'Reliability diagram' }));
    chart.append(svg('desc', { id: 'rel-desc', text: `Raw ECE ${num(fit.ece_raw.value)}, corrected ${fit.ece_calibrated ? num(fit.ece_calibrated.value) : 'n/a'}; the table below lists every bin.` }));
    chart.append(svg('rect', { x: String(pad), y: String(y(1)), width: String(span), height: String(span), fill: '#fbfcfd', stroke: '#d8dde3' }));
    for (let t = 0; t <= 10; t += 2) {
      const v = t / 10;
      chart.append(svg('line', { x1: String(x(v)), y1: String(y(0)), x2: String(x(v)), y2: String(y(1)), stroke: '#eef1f5' }));
      chart.append(svg('line', { x1: String(x(0)), y1: String(y(v)), x2: String(x(1)), y2: String(y(v)), stroke: '#eef1f5' }));
      chart.append(svg('text', { x: String(x(v)), y: String(size - pad + 16), 'text-anchor': 'middle', 'font-size': '11', fill: '#5b6470', text: v.toFixed(1) }));
      chart.append(svg('text', { x: String(pad - 6), y: String(y(v) + 4), 'text-anchor': 'end', 'font-size': '11', fill: '#5b6470', text: v.toFixed(1) }));
    }
    chart.append(svg('line', { x1: String(x(0)), y1: String(y(0)), x2: String(x(1)), y2: String(y(1)), stroke: '#9aa3ad', 'stroke-dasharray': '4 4' }));
    chart.append(svg('text', { x: String(x(0.5)), y: String(size - 6), 'text-anchor': 'middle', 'font-size': '12', fill: '#1b1f24', text: 'stated confidence' }));
    chart.append(svg('text', { x: '12', y: String(y(0.5)), 'text-anchor': 'middle', 'font-size': '12', fill: '#1b1f24', transform: `rotate(-90 12 ${y(0.5)})`, text: 'accuracy' }));
    const total = raw.reduce((s, b) => s + b.count, 0) || 1;
    const series = (bins, colour, shape) => {
      if (!bins.length) return;
      chart.append(svg('polyline', {
        points: bins.map((b) => `${x(b.confidence)},${y(b.accuracy)}`).join(' '), fill: 'none', stroke: colour, 'stroke-width': '2',
      }));
      for (const b of bins) {
        const r = 3 + 9 * Math.sqrt(b.count / total);
        const mark = shape === 'square'
          ? svg('rect', { x: String(x(b.confidence) - r), y: String(y(b.accuracy) - r), width: String(2 * r), height: String(2 * r), fill: colour, 'fill-opacity': '0.75' })
          : svg('circle', { cx: String(x(b.confidence)), cy: String(y(b.accuracy)), r: String(r), fill: colour, 'fill-opacity': '0.75' });
        chart.append(mark);
      }
    };
    series(raw, '#c2410c', 'circle');
    series(corrected, '#2457c5', 'square');
    const legend = (row, colour, text) => {
      chart.append(svg('rect', { x: String(pad + 10), y: String(y(1) + 8 + row * 18), width: '12', height: '12', fill: colour }));
      chart.append(svg('text', { x: String(pad + 28), y: String(y(1) + 18 + row * 18), 'font-size': '12', fill: '#1b1f24', text }));
    };
    legend(0, '#c2410c', `raw (ECE ${num(fit.ece_raw.value)})`);
    if (corrected.length) legend(1, '#2457c5', `corrected, held out (ECE ${num(fit.ece_calibrated ? fit.ece_calibrated.value : NaN)})`);
    clear($('reliability-chart')).append(chart);
    const body = clear($('reliability-table').querySelector('tbody'));
    const edges = [...new Set([...raw, ...corrected].map((b) => b.low))].sort((a, b) => a - b);
    for (const low of edges) {
      const r = raw.find((b) => b.low === low);
      const c = corrected.find((b) => b.low === low);
      const cells = (b) => (b ? [String(b.count), num(b.confidence), num(b.accuracy)] : ['0', '', '']);
      body.append(el('tr', {}, el('th', { scope: 'row', text: `${low.toFixed(1)}–${(low + 0.1).toFixed(1)}` }),
        ...cells(r).map((t) => el('td', { class: 'num', text: t })), ...cells(c).map((t) => el('td', { class: 'num', text: t }))));
    }
  }

  async function startCalibration() {
    clearError();
    const file = $('calibration-file').files[0];
    if (!file) { showError('Choose a .jsonl file of labelled questions.'); return; }
    const started = await guarded(() => api('PUT', '/v1/calibration', { body: file, type: 'application/x-ndjson' }));
    if (started) {
      setStatus(`Calibration started: ${started.data.progress.total} questions to read.`);
      await refreshCalibration();
    }
  }

  async function removeCalibration() {
    clearError();
    const done = await guarded(() => api('DELETE', '/v1/calibration'));
    if (done) {
      setStatus("The tenant's calibration was removed; answers use the server's again.");
      await refreshCalibration();
    }
  }

  function renderTasks(list, tasks) {
    clear(list);
    if (!tasks || !tasks.length) {
      list.append(el('li', { class: 'muted', text: 'Nothing running.' }));
      return;
    }
    tasks.forEach((task, i) => {
      const id = `${list.id}-task-${i}`;
      const eta = task.eta_s ? `, about ${Math.round(task.eta_s)} s left` : '';
      list.append(el('li', {},
        el('label', { for: id, text: `${task.task}: ${task.done}${task.total ? ` of ${task.total}` : ''} ${task.unit}${eta}${task.detail ? ` (${task.detail})` : ''}` }),
        task.total ? el('progress', { id, max: String(task.total), value: String(task.done) }) : el('progress', { id })));
    });
  }

  async function refreshTasks() {
    const health = await api('GET', '/health', { key: 'none' }).then((r) => r.data).catch((e) => ({ status: e.message, progress: [] }));
    state.health = health;
    renderTasks($('tasks'), health.progress);
  }

  async function refreshTenantAdmin() {
    show($('tenant-admin'), state.admin);
    show($('tenant-keys-note'), !state.admin);
    if (!state.admin) {
      await sampleUsage();
      return;
    }
    const select = clear($('tenant-select'));
    for (const tenant of state.tenants) select.append(el('option', { value: tenant.id, text: `${tenant.name} (${tenant.id})` }));
    select.append(el('option', { value: 'default', text: 'default (requests without a tenant key)' }));
    if (!state.tenantId) state.tenantId = state.tenants.length ? state.tenants[0].id : 'default';
    select.value = state.tenantId;
    await refreshKeysAndUsage();
  }

  async function refreshKeysAndUsage() {
    const id = state.tenantId;
    const tenant = state.tenants.find((t) => t.id === id);
    const body = clear($('keys-table').querySelector('tbody'));
    $('create-key').disabled = !tenant;
    if (tenant) {
      const keys = await guarded(() => api('GET', `/admin/v1/tenants/${id}/keys`, { key: 'admin' }));
      for (const key of keys ? keys.data.keys : []) {
        body.append(el('tr', {},
          el('td', {}, el('code', { text: key.id })),
          el('td', {}, el('code', { text: `${key.prefix}…` })),
          el('td', { text: when(key.created_at) }),
          el('td', { text: key.revoked_at ? when(key.revoked_at) : '' }),
          el('td', {}, key.revoked_at ? '' : el('button', {
            type: 'button', class: 'small danger', text: 'Revoke', 'aria-label': `Revoke ${key.id}`,
            onclick: () => guarded(async () => {
              await api('DELETE', `/admin/v1/tenants/${id}/keys/${key.id}`, { key: 'admin' });
              setStatus(`Revoked ${key.id}: it authenticates nothing from now on.`);
              await refreshKeysAndUsage();
            }),
          }))));
      }
      $('tenant-limits').textContent = JSON.stringify(tenant.limits, null, 2);
    } else {
      $('tenant-limits').textContent = "The default tenant has the server's limits (its flags).";
    }
    await sampleUsage();
  }

  /** Samples a tenant's usage: with the admin key the selected tenant's (the admin API),
   * else the API key's own (GET /v1/usage, which also says what is left of each rate now).
   * The server keeps totals since the start; the console keeps the samples it took while
   * open, which is what "over time" draws. */
  async function sampleUsage() {
    const own = !state.admin;
    if (!own && !state.tenantId) return;
    const got = own
      ? await api('GET', '/v1/usage').catch(() => null)
      : await api('GET', `/admin/v1/tenants/${state.tenantId}/usage`, { key: 'admin' }).catch(() => null);
    if (!got) return;
    const id = own ? got.data.tenant_id : state.tenantId;
    const usage = got.data.usage;
    const series = state.usage.filter((s) => s.id === id);
    if (series.length !== state.usage.length) state.usage = series;
    state.usage.push({ id, t: Date.now(), ...usage });
    if (state.usage.length > 120) state.usage.shift();
    const tenant = own ? { limits: got.data.limits || {} } : state.tenants.find((t) => t.id === id);
    renderRateLimits(tenant, usage, own ? got.data.rate_limits : null);
    const list = clear($('usage'));
    for (const [k, v] of Object.entries(usage)) list.append(el('dt', { text: k }), el('dd', { text: String(v) }));
    renderUsageChart();
  }

  function renderUsageChart() {
    const samples = state.usage;
    const box = clear($('usage-chart'));
    if (samples.length < 2) {
      box.append(el('p', { class: 'muted', text: 'Usage over time: the console samples every 5 s while this view is open.' }));
      return;
    }
    const w = 520;
    const h = 150;
    const pad = 30;
    const t0 = samples[0].t;
    const t1 = samples[samples.length - 1].t;
    const keys = [['requests', '#2457c5'], ['decisions', '#1f7a3a'], ['rate_limited', '#b42318']];
    const top = Math.max(1, ...samples.flatMap((s) => keys.map(([k]) => s[k] - samples[0][k])));
    const x = (t) => pad + ((t - t0) / Math.max(1, t1 - t0)) * (w - pad - 10);
    const y = (v) => h - pad - (v / top) * (h - pad - 28);
    const chart = svg('svg', { viewBox: `0 0 ${w} ${h}`, width: String(w), height: String(h), role: 'img', 'aria-label': `Requests, decisions and rate-limited requests since the console opened: ${keys.map(([k]) => `${k} ${samples[samples.length - 1][k] - samples[0][k]}`).join(', ')}` });
    chart.append(svg('line', { x1: String(pad), y1: String(y(0)), x2: String(w - 10), y2: String(y(0)), stroke: '#d8dde3' }));
    chart.append(svg('text', { x: String(pad - 4), y: String(y(top) + 4), 'text-anchor': 'end', 'font-size': '11', fill: '#5b6470', text: String(top) }));
    keys.forEach(([k, colour], i) => {
      chart.append(svg('polyline', { points: samples.map((s) => `${x(s.t)},${y(s[k] - samples[0][k])}`).join(' '), fill: 'none', stroke: colour, 'stroke-width': '2' }));
      chart.append(svg('text', { x: String(pad + 8 + i * 120), y: '14', 'font-size': '12', fill: colour, text: `${k} +${samples[samples.length - 1][k] - samples[0][k]}` }));
    });
    chart.append(svg('text', { x: String(w - 10), y: String(h - 8), 'text-anchor': 'end', 'font-size': '11', fill: '#5b6470', text: `last ${Math.round((t1 - t0) / 1000)} s` }));
    box.append(chart);
  }

  /** The tenant's rates and how often they refused it, and with `now` (GET /v1/usage's
   * rate_limits: the x-ratelimit-* figures) what is left of each rate at this moment. */
  function renderRateLimits(tenant, usage, now) {
    const box = $('ratelimit-state');
    const rates = ['requests_per_minute', 'decisions_per_minute', 'input_tokens_per_minute', 'concurrent_requests', 'queued_requests']
      .filter((k) => tenant && tenant.limits[k] !== undefined && tenant.limits[k] !== null)
      .map((k) => `${k} = ${tenant.limits[k]}`);
    box.textContent = `${rates.length ? `Rates: ${rates.join(', ')}` : "Rates: the server's defaults (its --tenant-* flags)"}; `
      + `requests refused by a rate, concurrency or queue limit since the start: ${usage.rate_limited}. `
      + 'Each decision response carries x-ratelimit-limit-*, -remaining-* and -reset-* headers with what is left now.';
    const left = Object.entries(now || {}).filter(([k]) => k.startsWith('x-ratelimit-remaining-'));
    if (left.length) {
      box.textContent += ` Left now: ${left.map(([k, v]) => {
        const kind = k.slice('x-ratelimit-remaining-'.length);
        return `${kind} ${v} of ${now[`x-ratelimit-limit-${kind}`]} (full in ${now[`x-ratelimit-reset-${kind}`]})`;
      }).join(', ')}.`;
    }
  }

  // ---- operator view -----------------------------------------------------------------------

  async function refreshOperator() {
    show($('operator-note'), !state.admin);
    const health = await api('GET', '/health', { key: 'none' }).then((r) => r.data).catch((e) => ({ status: e.message }));
    state.health = health;
    const model = clear($('model'));
    const add = (k, v) => model.append(el('dt', { text: k }), el('dd', { text: typeof v === 'object' ? JSON.stringify(v) : String(v) }));
    add('status', health.status);
    if (health.step) add('step', health.step);
    if (health.reason) add('reason', health.reason);
    if (health.status === 'ok' || health.model) {
      add('model', health.model);
      add('architecture', `${health.arch} on ${health.device} (${health.forward})`);
      if (health.self_check) add('self-check option mass', `${num(health.self_check.option_mass)} (refused below ${health.self_check.min_mass})`);
      add('readouts', health.readouts);
      const setup = health.setup || {};
      add('setup', `renderer ${setup.renderer}, labels ${setup.labels}, readout ${setup.readout} (source ${setup.source})`);
      if (setup.serving) add('served setup', setup.serving);
      if (setup.tuning) add('tuning', setup.tuning);
      add('pending startup work', (setup.pending || []).join(', ') || 'none');
      const c = health.calibration || {};
      add('correction (calibration)', `${c.policy}, T = ${num(c.temperature, 3)}, params ${JSON.stringify(c.params)} (source ${c.source})`);
      add('min option mass', health.min_option_mass);
    }
    const queue = clear($('queue'));
    const meter = (label, value, max, text) => {
      const id = `m-${++fieldIds}`;
      queue.append(el('div', { class: 'meter' }, el('label', { for: id, text: `${label}: ${text}` }),
        el('progress', { id, max: String(max || 1), value: String(value) })));
    };
    if (health.queue) {
      const q = health.queue;
      meter('Queued requests', q.requests, q.max_requests, `${q.requests} of ${q.max_requests || '∞'}`);
      meter('Queued tokens', q.tokens, q.max_tokens, `${q.tokens} of ${q.max_tokens || '∞'}`);
    }
    if (health.prefix_cache) {
      const c = health.prefix_cache;
      meter('Prefix cache', c.bytes, c.budget_bytes, `${(c.bytes / 1048576).toFixed(1)} of ${(c.budget_bytes / 1048576).toFixed(0)} MiB, ${c.entries} runs`);
      const hits = c.hits + c.misses ? pct(c.hits / (c.hits + c.misses)) : 'n/a';
      queue.append(el('p', { class: 'muted', text: `Lookups: ${c.hits} hits, ${c.misses} misses (${hits} hit)${c.block_hits !== undefined ? `; blocks: ${c.block_hits} hit, ${c.block_misses} missed` : ''}. In flight: ${health.in_flight}.` }));
    }
    renderTasks($('progress'), health.progress);
    if (!state.admin) return;
    const tenants = await guarded(() => api('GET', '/admin/v1/tenants', { key: 'admin' }));
    if (tenants) state.tenants = tenants.data.tenants;
    const body = clear($('tenants').querySelector('tbody'));
    for (const tenant of state.tenants) {
      body.append(el('tr', {},
        el('td', {}, el('code', { text: tenant.id })),
        el('td', { text: tenant.name }),
        el('td', {}, el('code', { text: JSON.stringify(tenant.limits) })),
        el('td', { text: when(tenant.created_at) }),
        el('td', {},
          el('button', { type: 'button', class: 'small', text: 'Limits', 'aria-label': `Limits of ${tenant.name}`, onclick: () => editLimits(tenant) }), ' ',
          el('button', {
            type: 'button', class: 'small', text: 'Keys and usage', 'aria-label': `Keys and usage of ${tenant.name}`,
            onclick: () => { state.tenantId = tenant.id; selectView('view-tenant'); },
          }), ' ',
          el('button', {
            type: 'button', class: 'small danger', text: 'Delete', 'aria-label': `Delete ${tenant.name}`,
            onclick: () => {
              // eslint-disable-next-line no-alert
              if (!window.confirm(`Delete ${tenant.name} with its keys, plugins and calibration?`)) return;
              guarded(async () => {
                await api('DELETE', `/admin/v1/tenants/${tenant.id}`, { key: 'admin' });
                await refreshOperator();
              });
            },
          }))));
    }
    const metrics = await api('GET', '/metrics', { key: 'admin' }).catch((e) => ({ data: e.message }));
    $('metrics').textContent = typeof metrics.data === 'string' ? metrics.data : JSON.stringify(metrics.data);
  }

  let editing = null;
  function editLimits(tenant) {
    editing = tenant;
    $('limits-title').textContent = `Limits of ${tenant.name}`;
    $('limits-json').value = JSON.stringify(tenant.limits, null, 2);
    $('limits-form').hidden = false;
    $('limits-json').focus();
  }

  async function saveLimits() {
    clearError();
    let limits;
    try { limits = JSON.parse($('limits-json').value); } catch (error) { showError(`The limits are not JSON: ${error.message}`); return; }
    const saved = await guarded(() => api('PATCH', `/admin/v1/tenants/${editing.id}`, { key: 'admin', body: { limits } }));
    if (saved) {
      setStatus(`Saved the limits of ${editing.name}.`);
      $('limits-form').hidden = true;
      await refreshOperator();
    }
  }

  // ---- views and timers --------------------------------------------------------------------

  let currentView = 'view-playground';
  let selectView = () => {};
  function later(work, ms) {
    const timer = setTimeout(() => { state.timers = state.timers.filter((t) => t !== timer); work(); }, ms);
    state.timers.push(timer);
  }
  function refreshView() {
    if (currentView === 'view-tenant') refreshTenant();
    if (currentView === 'view-operator') refreshOperator();
  }

  function init() {
    loadKeys();
    selectView = setupTabs(document.querySelector('.tabs'), (id) => { currentView = id; refreshView(); });
    setupTabs(document.querySelector('.tabs.small'));
    $('keys').addEventListener('submit', (event) => { event.preventDefault(); connect(); });
    $('qtype').addEventListener('change', () => chooseType($('qtype').value));
    $('input').addEventListener('input', renderSnippets);
    $('question-json').addEventListener('change', () => {
      try {
        const parsed = JSON.parse($('question-json').value);
        if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('a question is a JSON object');
        state.question = parsed;
        clearError();
        renderForm();
      } catch (error) { showError(`The question JSON is not valid: ${error.message}`); }
    });
    $('ask-form').addEventListener('submit', (event) => { event.preventDefault(); ask(); });
    $('upload-form').addEventListener('submit', (event) => { event.preventDefault(); upload(); });
    $('calibration-form').addEventListener('submit', (event) => { event.preventDefault(); startCalibration(); });
    $('calibration-remove').addEventListener('click', removeCalibration);
    $('tenant-select').addEventListener('change', () => { state.tenantId = $('tenant-select').value; state.usage = []; refreshKeysAndUsage(); });
    $('create-key').addEventListener('click', () => guarded(async () => {
      const made = await api('POST', `/admin/v1/tenants/${state.tenantId}/keys`, { key: 'admin', body: {} });
      const box = $('new-key');
      clear(box).append(el('strong', { text: 'New key (shown once; only its hash is stored): ' }), el('code', { text: made.data.key }), ' ',
        el('button', { type: 'button', class: 'small', text: 'Copy', onclick: (event) => copy(made.data.key, event.target) }));
      box.hidden = false;
      await refreshKeysAndUsage();
    }));
    $('tenant-form').addEventListener('submit', (event) => {
      event.preventDefault();
      guarded(async () => {
        await api('POST', '/admin/v1/tenants', { key: 'admin', body: { name: $('tenant-name').value.trim() } });
        $('tenant-name').value = '';
        await refreshOperator();
      });
    });
    $('limits-form').addEventListener('submit', (event) => { event.preventDefault(); saveLimits(); });
    $('limits-cancel').addEventListener('click', () => { $('limits-form').hidden = true; });
    for (const button of document.querySelectorAll('.snippet .copy')) {
      button.addEventListener('click', () => copy(button.parentElement.querySelector('pre').textContent, button));
    }
    // Usage over time: one sample every 5 s while the tenant view shows it.
    setInterval(() => { if (currentView === 'view-tenant' && !document.hidden) sampleUsage(); }, 5000);
    connect();
  }

  document.addEventListener('DOMContentLoaded', init);
})();
