# Sourced by the GPU benchmark scripts (h200_side_by_side.sh, shapes_side_by_side.sh): waiting
# for a server they started and stopping it, the same way for decide and vLLM.

wait_ready() {  # wait_ready URL PID SECONDS: 0 once URL answers; 1 if the server exits or SECONDS pass
  for _ in $(seq 1 "$3"); do
    python3 -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "server exited during start-up"; return 1; }
    sleep 1
  done
  echo "server not ready after $3 s"
  return 1
}

stop() {  # stop PID: TERM, then KILL the process and whatever it started
  local kids
  kids=$(pgrep -P "$1" 2>/dev/null)
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$1" $kids 2>/dev/null
  wait "$1" 2>/dev/null
}
