#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plays systemd's part for a Type=notify service: binds the notification
socket, starts keylessd with NOTIFY_SOCKET pointing at it, and checks the
readiness protocol (docs/OPERATIONS.md "Signals and reload"):
  - READY=1 arrives, and when it does the port already accepts connections
    (keys are loaded before: the caller passes a key directory);
  - SIGTERM brings STOPPING=1, then exit status 0;
  - with --expect-fail: keylessd exits non-zero and never says READY=1.
Usage: notify_check.py [--expect-fail] PORT -- KEYLESSD ARGS...
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

READY_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0


def fail(msg):
    print("notify_check: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def messages(sock, deadline, proc):
    """Yields datagrams until the deadline; stops early if proc exits and
    nothing more is queued."""
    while time.monotonic() < deadline:
        sock.settimeout(0.1)
        try:
            data, _ = sock.recvfrom(4096)
        except socket.timeout:
            if proc.poll() is not None:
                # one last look: a datagram sent just before exiting
                sock.settimeout(0.2)
                try:
                    data, _ = sock.recvfrom(4096)
                except socket.timeout:
                    return
            else:
                continue
        yield data.decode("utf-8", "replace")


def port_accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def main():
    args = sys.argv[1:]
    expect_fail = False
    if args and args[0] == "--expect-fail":
        expect_fail = True
        args = args[1:]
    if len(args) < 3 or args[1] != "--":
        fail("usage: notify_check.py [--expect-fail] PORT -- CMD...")
    port = int(args[0])
    cmd = args[2:]

    tmp = tempfile.mkdtemp(prefix="kl-notify-")
    path = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    proc = subprocess.Popen(cmd, env=env)
    try:
        got = []
        ready_at_listen = None
        for m in messages(sock, time.monotonic() + READY_TIMEOUT, proc):
            got.append(m)
            fields = m.split("\n")
            if "READY=1" in fields:
                # the readiness promise: the port listens at this instant
                ready_at_listen = port_accepts(port)
                break
        if expect_fail:
            try:
                rc = proc.wait(timeout=READY_TIMEOUT)
            except subprocess.TimeoutExpired:
                fail("keylessd kept running with a broken configuration")
            if rc == 0:
                fail("keylessd exited 0 with a broken configuration")
            if ready_at_listen is not None:
                fail("READY=1 sent although startup failed")
            print("notify_check: ok: exit %d, no READY=1 (got %r)" % (rc, got))
            return
        if ready_at_listen is None:
            fail("no READY=1 within %.0fs (exit status %r, messages %r); "
                 "does keylessd call kl_sd_notify(\"READY=1\") once it "
                 "listens?" % (READY_TIMEOUT, proc.poll(), got))
        if not ready_at_listen:
            fail("READY=1 arrived before port %d accepted connections" % port)
        print("notify_check: ok: READY=1 with port %d listening" % port)

        proc.send_signal(signal.SIGTERM)
        stopping = False
        for m in messages(sock, time.monotonic() + STOP_TIMEOUT, proc):
            if "STOPPING=1" in m.split("\n"):
                stopping = True
                break
        try:
            rc = proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            fail("keylessd did not exit within %.0fs of SIGTERM" % STOP_TIMEOUT)
        if not stopping:
            fail("no STOPPING=1 after SIGTERM")
        if rc != 0:
            fail("exit status %d after SIGTERM, expected 0" % rc)
        print("notify_check: ok: STOPPING=1 on SIGTERM, exit 0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
        os.unlink(path)
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
