// The shell page: opens a session with the page's form (its CSRF token, the typed name
// of a production environment), then carries it over the session's WebSocket into an
// xterm.js terminal fitted to its box. Binary messages are bytes after a channel byte
// (0 typed, 1 output, 2 error output); text messages are JSON (docs: decisions.md).
(function () {
  "use strict";

  var INPUT = 0, OUTPUT = 1, ERROR = 2;

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.querySelector("form[data-shell]");
    if (!form) return;
    var open = form.querySelector("[data-shell-open]");
    var close = form.querySelector("[data-shell-close]");
    var status = document.getElementById("shell-status");
    var box = document.getElementById("terminal");
    var encoder = new TextEncoder();
    var term = null, fit = null, socket = null;

    function say(text, state) {
      status.textContent = text;
      status.dataset.state = state;
    }

    function idle() {
      socket = null;
      open.disabled = false;
      close.hidden = true;
      if (term) term.options.disableStdin = true;
    }

    // A refusal's message: the route's JSON, else the console's error page's own words.
    function refusal(response) {
      var type = response.headers.get("Content-Type") || "";
      var read = type.indexOf("application/json") === 0
        ? response.json().then(function (body) { return body.message; })
        : response.text().then(function (text) {
          var page = new DOMParser().parseFromString(text, "text/html");
          var said = page.querySelector("main [role=alert]");
          return said ? said.textContent : null;
        });
      return read.then(function (message) {
        throw new Error(message || "The shell could not be opened (" + response.status + ").");
      });
    }

    function send(channel, bytes) {
      if (!socket || socket.readyState !== WebSocket.OPEN) return;
      var frame = new Uint8Array(bytes.length + 1);
      frame[0] = channel;
      frame.set(bytes, 1);
      socket.send(frame);
    }

    function terminal() {
      if (term) term.dispose();
      box.hidden = false;
      term = new Terminal({cursorBlink: true, fontSize: 14, scrollback: 5000,
                           fontFamily: "ui-monospace, SFMono-Regular, Menlo, monospace"});
      fit = new FitAddon.FitAddon();
      term.loadAddon(fit);
      term.open(box);
      fit.fit();
      window.berthTerminal = term;  // what the page's tests read
      term.onData(function (data) { send(INPUT, encoder.encode(data)); });
      term.onBinary(function (data) {
        send(INPUT, Uint8Array.from(data, function (c) { return c.charCodeAt(0); }));
      });
      term.onResize(function (size) {
        if (socket && socket.readyState === WebSocket.OPEN) {
          socket.send(JSON.stringify({type: "resize", rows: size.rows, cols: size.cols}));
        }
      });
    }

    function start(opened) {
      terminal();
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      var ws = socket = new WebSocket(scheme + location.host + opened.stream_path);
      var ended = false;
      ws.binaryType = "arraybuffer";
      ws.onopen = function () {
        ws.send(JSON.stringify({ticket: opened.ticket, rows: term.rows, cols: term.cols}));
      };
      ws.onmessage = function (message) {
        if (typeof message.data !== "string") {
          var bytes = new Uint8Array(message.data);
          if (bytes[0] === OUTPUT || bytes[0] === ERROR) term.write(bytes.subarray(1));
          return;
        }
        var said = JSON.parse(message.data);
        if (said.type === "opened") {
          say(opened.odoo ? "Connected: Odoo shell." : "Connected: shell.", "open");
          close.hidden = false;
          term.focus();
        } else if (said.type === "exit") {
          ended = true;
          say("The session ended: exit status " + said.exit_code + ".", "exit");
        } else if (said.type === "error") {
          ended = true;
          say(said.message, "error");
        }
      };
      ws.onclose = function () {
        if (!ended) say("The connection was closed.", "closed");
        idle();
      };
    }

    window.addEventListener("resize", function () { if (term && socket) fit.fit(); });

    close.addEventListener("click", function () {
      if (socket && socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({type: "close"}));
      }
    });

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (socket) return;
      open.disabled = true;
      say("Opening…", "opening");
      fetch(form.action, {method: "POST", body: new FormData(form), credentials: "same-origin",
                          headers: {"Accept": "application/json"}})
        .then(function (r) { return r.ok ? r.json() : refusal(r); })
        .then(start)
        .catch(function (err) { say(err.message, "error"); open.disabled = false; });
    });
  });
})();
