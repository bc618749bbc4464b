#!/usr/bin/env bash
# bench/carry-cmocka.sh — the old name of bench/gpu-prepare.sh, kept so that
# notes and habits that call it still work. It now does all of the
# preparation: cmocka into .carry/cmocka AND the commit into .carry/commit
# (bench/gpu-check.sh reads it where .git did not travel). Same environment
# (CBT_CARRY_DIR) and exit status (3: cmocka could not be fetched).
exec bash "$(dirname "$0")/gpu-prepare.sh" "$@"
