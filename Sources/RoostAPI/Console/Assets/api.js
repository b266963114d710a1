// Every call the console makes goes through `Api`: the public HTTP API of
// docs/api.md with `Authorization: Bearer <key>`, nothing private. The key
// lives in this object only (memory), never in storage, a cookie or a URL.

/** An answer that is not 2xx, or a network failure (status 0). */
export class ApiError extends Error {
  constructor(status, code, message, headers) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = headers;
  }

  /** Returns what went wrong, in words a person can act on. */
  describe() {
    const retry = this.headers ? this.headers.get('Retry-After') : null;
    switch (this.status) {
      case 0:
        return 'The server could not be reached (network failure). Check that Roost is running and the network is up, then try again.';
      case 401:
        return 'The key was refused (401 unauthorized): it is wrong, it was revoked, or its app was deleted. Sign out and sign in with a valid key.';
      case 403:
        return `Not allowed (403 forbidden): ${this.message}.`;
      case 404:
        return `Not found (404): ${this.message}.`;
      case 410:
        return `Gone (410 ${this.code}): ${this.message}.`;
      case 412:
        return `Someone changed this device meanwhile (412): ${this.message}. Reload it and try again.`;
      case 429:
        return `Too many requests (429): this key is over its rate limit. Wait ${retry || 'a few'} second${retry === '1' ? '' : 's'} and try again.`;
      case 503: {
        if (this.code === 'not_leader') {
          const leader = this.headers.get('Roost-Leader');
          return leader
            ? `This node is not the leader (503 not_leader): writes go to the leader at ${leader}.`
            : 'This node is not the leader (503 not_leader), and it knows no leader yet.';
        }
        if (this.code === 'no_leader') return 'The cluster has no leader right now (503 no_leader): try again in a second.';
        return `The server cannot take this now (503 ${this.code}): ${this.message}. Try again${retry ? ` in ${retry} s` : ''}.`;
      }
      default:
        return `The request failed (${this.status} ${this.code}): ${this.message}.`;
    }
  }
}

export class Api {
  #key;

  constructor(key) {
    this.#key = key;
  }

  /** Forgets the key. */
  forget() {
    this.#key = null;
  }

  /**
   * Sends one request; returns {status, headers, json, text}. Throws ApiError
   * for a non-2xx answer or a network failure. `options`: body (an object,
   * sent as JSON), headers, signal, text (read the body as text).
   */
  async request(method, path, options = {}) {
    if (this.#key === null) throw new ApiError(401, 'unauthorized', 'signed out', new Headers());
    const headers = { Authorization: `Bearer ${this.#key}`, ...(options.headers || {}) };
    let body;
    if (options.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(options.body);
    }
    let response;
    try {
      response = await fetch(path, {
        method, headers, body, signal: options.signal, cache: 'no-store', credentials: 'omit',
        referrerPolicy: 'no-referrer',
      });
    } catch (error) {
      if (error.name === 'AbortError') throw error;
      throw new ApiError(0, 'network', String(error.message || error), new Headers());
    }
    const text = await response.text();
    if (!response.ok) {
      let code = `http_${response.status}`;
      let message = response.statusText || 'no message';
      try {
        const envelope = JSON.parse(text).error;
        if (envelope) {
          code = envelope.code || code;
          message = envelope.message || message;
        }
      } catch (_) {
        // Not the JSON envelope: keep the status line's words.
      }
      throw new ApiError(response.status, code, message, response.headers);
    }
    let json = null;
    if (!options.text && text.length > 0) json = JSON.parse(text);
    return { status: response.status, headers: response.headers, json, text };
  }

  get(path, options) {
    return this.request('GET', path, options);
  }

  /** Returns the response itself for a streamed read (the NDJSON export). */
  async stream(path, signal) {
    let response;
    try {
      response = await fetch(path, {
        headers: { Authorization: `Bearer ${this.#key}` }, signal, cache: 'no-store', credentials: 'omit',
      });
    } catch (error) {
      if (error.name === 'AbortError') throw error;
      throw new ApiError(0, 'network', String(error.message || error), new Headers());
    }
    if (!response.ok) {
      let code = `http_${response.status}`;
      let message = response.statusText;
      try {
        const envelope = JSON.parse(await response.text()).error;
        code = envelope.code;
        message = envelope.message;
      } catch (_) {
        // Keep the status line.
      }
      throw new ApiError(response.status, code, message, response.headers);
    }
    return response;
  }
}

/** Returns the path segment of an id, escaped. */
export function seg(value) {
  return encodeURIComponent(value);
}
