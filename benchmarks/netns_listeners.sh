#!/bin/bash
# Beside an emulated-cluster run (not under /tmp/netns.lock: it only reads): once a second, for
# every namespace named <prefix>-h<N>, each listening TCP port and the command line of the
# process holding it, appended to FILE, for benchmarks/wire_timeline.py (LISTENERS).
# Usage: benchmarks/netns_listeners.sh FILE &   ... the run ...   kill %1
out=${1:?usage: netns_listeners.sh FILE}
while true; do
  for ns in $(ip netns list | awk '{print $1}' | grep -E -- '-h[0-9]+$'); do
    ip netns exec "$ns" ss -tlnpH 2>/dev/null | while read -r st rq sq local peer users; do
      port=${local##*:}
      pid=$(echo "$users" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
      [ -n "$pid" ] || continue
      cmd=$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-300 | tr '\n\t' '  ')
      echo -e "$ns\t$port\t$pid\t$cmd"
    done
  done >> "$out"
  sleep 1
done
