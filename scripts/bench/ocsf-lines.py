#!/usr/bin/env python3
# ocsf-lines.py COUNT OUT [DOC]: write COUNT varied OCSF JSON lines, the
# collector benchmark's input. The events are the OCSF examples in
# docs/events.md (what the producers emit), varied per line (time, pid,
# ports, hosts, paths) so that every line is a distinct event. Output is
# deterministic: pkg/actionevent/testdata/collector-lines.jsonl is
#   scripts/bench/ocsf-lines.py 60 pkg/actionevent/testdata/collector-lines.jsonl
import json, re, sys
n, out = int(sys.argv[1]), sys.argv[2]
doc = open(sys.argv[3] if len(sys.argv) > 3 else "docs/events.md").read()
ex = {m.group(1): json.loads(m.group(2)) for m in
      re.finditer(r'<!-- ocsf-example: ([a-z0-9-]+) -->\n```json\n(.*?)```', doc, re.S)}
# The mix a busy sandbox produces: mostly proxied HTTP and connections,
# some denials, some process launches.
mix = ["http-allowed"] * 4 + ["network-open-allowed"] * 3 + ["http-denied", "network-open-denied", "process-launch"]
mix = [m for m in mix if m in ex]
if not mix:
    sys.exit("no OCSF examples found in docs/events.md")
hosts = ["github.com", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "api.example.com"]
with open(out, "w") as f:
    for i in range(n):
        e = json.loads(json.dumps(ex[mix[i % len(mix)]]))
        e["time"] = e["time"] + i
        for p in (e.get("actor", {}).get("process"), e.get("process")):
            if p:
                p["pid"] = 1000 + i % 60000
        d = e.get("dst_endpoint")
        if d:
            d["hostname"] = hosts[i % len(hosts)]
            d["port"] = 443 if i % 3 else 80
        s = e.get("src_endpoint")
        if s:
            s["port"] = 20000 + i % 40000
        u = e.get("http_request", {}).get("url")
        if u:
            u["hostname"] = hosts[i % len(hosts)]
            u["path"] = "/simple/pkg-%d/" % (i % 9973)
            u["url_string"] = "%s://%s/simple/pkg-%d/" % (u.get("scheme", "https"), u["hostname"], i % 9973)
        f.write(json.dumps(e, separators=(",", ":")) + "\n")
