"""The scenarios of scripts/integration/nginx-sync.py, by subject (that script's docstring numbers
them):

    common     the checks, a scenario's heading, nginx log and index helpers
    basics     first install, no-change sync, objects update, resume, revoke, client version and
               channels, a same-second republish (1-7)
    deltas     updates by delta, with every fallback and crashes (9)
    indexes    on-demand packages and a sharded index
    transport  verify over HTTP(S), an untrusted CA, connection reuse (8, 10)
"""
