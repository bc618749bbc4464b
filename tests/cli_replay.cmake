# tests/cli_replay.cmake — `cbt replay`: a small event file becomes the spans
# it should (names, parents, times, typed attributes, tensor-parallel pairing,
# CacheBlend), and every kind of bad input stops the replay with its file,
# line and problem named and exit 2 (or, with --keep-going, is skipped and
# counted). Run by ctest as: cmake -DCBT=<path> -DWORKDIR=<dir> -P cli_replay.cmake
set(D ${WORKDIR}/cli-replay)
file(REMOVE_RECURSE ${D})
file(MAKE_DIRECTORY ${D})

# replay(code pattern [args...]): run `cbt replay args`, expect the exit code
# and, when pattern is not empty, stdout+stderr matching it; sets OUT / ERR.
function(replay code pattern)
  execute_process(COMMAND ${CBT} replay ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err WORKING_DIRECTORY ${D} TIMEOUT 60)
  if(NOT rc EQUAL ${code})
    message(FATAL_ERROR "cbt replay ${ARGN}: exit ${rc}, expected ${code}\n${out}\n${err}")
  endif()
  if(pattern AND NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "cbt replay ${ARGN}: output does not match '${pattern}':\n${out}\n${err}")
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
endfunction()

# bad(pattern line): a one-line file holding `line` is refused with exit 2 and
# a message "<file>:1: <pattern>"
set(BADN 0)
function(bad pattern line)
  math(EXPR n "${BADN} + 1")
  set(BADN ${n} PARENT_SCOPE)
  file(WRITE ${D}/bad${n}.jsonl "${line}\n")
  replay(2 "bad${n}.jsonl:1: ${pattern}" --events bad${n}.jsonl)
endfunction()

# ---- a good file ---------------------------------------------------------------------
# MP: REQUEST_END before the stores end (deferred); two tensor-parallel
# workers (pair 0 and 1) store at once, their ENDs in the other order, so
# pairing by `pair` is what keeps each span's START and END together. CB: a
# full request. T is 1.7e18 ns.
set(T 17000000000)
file(WRITE ${D}/good.jsonl
"{\"type\": \"mp.request.start\", \"ts_ns\": ${T}00000001, \"session\": \"req-1\"}
{\"type\": \"mp.lookup_prefetch.start\", \"ts_ns\": ${T}00000002, \"session\": \"req-1\"}
{\"type\": \"mp.lookup_prefetch.end\", \"ts_ns\": ${T}00000003, \"session\": \"req-1\", \"meta\": {\"hit_tokens\": 256, \"requested_tokens\": 1024, \"found_count\": 1}}
{\"type\": \"mp.store.submitted\", \"ts_ns\": ${T}00000004, \"session\": \"req-1\", \"meta\": {\"device\": \"cuda:0\"}}
{\"type\": \"mp.store.submitted\", \"ts_ns\": ${T}00000004, \"session\": \"req-1\", \"meta\": {\"device\": \"cuda:1\"}}
{\"type\": \"mp.store.start\", \"ts_ns\": ${T}00000005, \"session\": \"req-1\", \"pair\": 0, \"meta\": {\"device\": \"cuda:0\", \"engine_id\": 0, \"ratio\": 0.5, \"lazy\": false}}

{\"type\": \"mp.store.start\", \"ts_ns\": ${T}00000006, \"session\": \"req-1\", \"pair\": 1, \"meta\": {\"device\": \"cuda:1\", \"engine_id\": 1}}
{\"type\": \"mp.request.end\", \"ts_ns\": ${T}00000007, \"session\": \"req-1\"}
{\"type\": \"MP_STORE_END\", \"ts_ns\": ${T}00000008, \"session\": \"req-1\", \"pair\": 1, \"meta\": {\"stored_count\": 3}}
{\"type\": \"mp.store.end\", \"ts_ns\": ${T}00000009, \"session\": \"req-1\", \"pair\": 0, \"meta\": {\"stored_count\": 2}}
{\"type\": \"l1.eviction.loop_tick\", \"ts_ns\": ${T}00000010, \"meta\": {\"usage\": 0.25, \"watermark\": 0.9, \"triggered\": false}}
  {\"type\":\"cb.request.start\",\"ts_ns\":${T}00000011,\"session\":\"cb-1\"}
{\"type\":\"cb.lookup.start\",\"ts_ns\":${T}00000012,\"session\":\"cb-1\",\"meta\":{\"num_tokens\":512}}
{\"type\":\"cb.lookup.end\",\"ts_ns\":${T}00000013,\"session\":\"cb-1\",\"meta\":{\"hit_tokens\":256,\"requested_tokens\":512}}
{\"type\":\"cb.retrieve.submitted\",\"ts_ns\":${T}00000014,\"session\":\"cb-1\",\"meta\":{\"instance_id\":0}}
{\"type\":\"cb.retrieve.start\",\"ts_ns\":${T}00000015,\"session\":\"cb-1\",\"meta\":{\"num_chunks\":2,\"worker_id\":0}}
{\"type\":\"cb.scatter.start\",\"ts_ns\":${T}00000016,\"session\":\"cb-1\",\"meta\":{\"scattered_tokens\":256}}
{\"type\":\"cb.scatter.end\",\"ts_ns\":${T}00000017,\"session\":\"cb-1\",\"meta\":{\"success\":true}}
{\"type\":\"cb.request.end\",\"ts_ns\":${T}00000018,\"session\":\"cb-1\"}
{\"type\":\"cb.retrieve.end\",\"ts_ns\":${T}00000019,\"session\":\"cb-1\",\"meta\":{\"success\":false,\"worker_id\":0}}
")
replay(0 "good.jsonl: 21 lines, 20 events read, 20 published, 0 refused, 0 lines skipped"
       --events good.jsonl --spans good-spans.jsonl)
if(NOT ERR MATCHES "mp: roots 1 opened \\(0 lazy, 1 deferred\\) 1 closed, children 3/3"
   OR NOT ERR MATCHES "cb: roots 1 opened \\(1 deferred\\) 1 closed, children 3/3")
  message(FATAL_ERROR "unexpected builder counts in the summary:\n${ERR}")
endif()

# the spans, by name (the two stores by engine_id)
file(STRINGS ${D}/good-spans.jsonl lines)
list(LENGTH lines n)
if(NOT n EQUAL 8)
  message(FATAL_ERROR "good-spans.jsonl has ${n} spans, expected 8:\n${lines}")
endif()
foreach(l IN LISTS lines)
  string(JSON name GET "${l}" name)
  string(JSON id GET "${l}" span_id)
  if(name STREQUAL "mp.store")
    string(JSON eng GET "${l}" attributes engine_id)
    set(name "mp.store${eng}")
  endif()
  set(S_${name} "${l}")
  set(ID_${name} "${id}")
endforeach()
# span(name field... expected): one field of span `name` must read `expected`
function(span name)
  set(args ${ARGN})
  list(POP_BACK args want)
  if(want STREQUAL "<empty>")
    set(want "")
  endif()
  string(JSON got ERROR_VARIABLE e GET "${S_${name}}" ${args})
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "span ${name}: ${args} is '${got}' ${e}, expected '${want}'\n${S_${name}}")
  endif()
endfunction()
function(span_type name want)
  string(JSON got TYPE "${S_${name}}" ${ARGN})
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "span ${name}: ${ARGN} is a ${got}, expected ${want}\n${S_${name}}")
  endif()
endfunction()
span(request start_ns ${T}00000001)
span(request end_ns ${T}00000007)  # deferred: stamped with the REQUEST_END time
span(request parent_span_id <empty>)
span(request attributes hit_tokens 256)
span(request attributes hit_rate 0.25)
span(mp.lookup_prefetch parent_span_id ${ID_request})
span(mp.store0 parent_span_id ${ID_request})
span(mp.store0 start_ns ${T}00000005)
span(mp.store0 end_ns ${T}00000009)   # its own END, not worker 1's
span(mp.store0 attributes stored_count 2)
span(mp.store0 attributes device cuda:0)
span(mp.store1 start_ns ${T}00000006)
span(mp.store1 end_ns ${T}00000008)
span(mp.store1 attributes stored_count 3)
span_type(mp.store0 NUMBER attributes ratio)  # typed, as in the file
span(mp.store0 attributes ratio 0.5)
span_type(mp.store0 BOOLEAN attributes lazy)
span_type(mp.store0 NUMBER attributes engine_id)
span(cb.request end_ns ${T}00000019)  # deferred: the last CB_RETRIEVE_END (V3)
span(cb.request attributes cbt.gpu_tail_ns 1)
span(cb.lookup parent_span_id ${ID_cb.request})
span(cb.retrieve parent_span_id ${ID_cb.request})
span(cb.scatter parent_span_id ${ID_cb.retrieve})
span(cb.retrieve status error)  # success false
span(cb.scatter status unset)

# the same file from stdin, spans to stdout
execute_process(COMMAND ${CBT} replay --events - INPUT_FILE ${D}/good.jsonl
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
string(REGEX MATCHALL "\"span_id\"" ids "${out}")
list(LENGTH ids n)
if(NOT rc EQUAL 0 OR NOT n EQUAL 8 OR NOT err MATCHES "<stdin>: 21 lines")
  message(FATAL_ERROR "replay from stdin: exit ${rc}, ${n} spans on stdout\n${err}")
endif()

# ---- flags ---------------------------------------------------------------------------
replay(2 "which recording\\? \\(cbt replay FILE.lct\\)")
replay(2 "unknown option '--bogus'" --events good.jsonl --bogus)
replay(2 "--events needs a file name" --events)
replay(2 "--spans needs a file name" --events good.jsonl --spans)
replay(2 "--mp-root-end needs request_end or transfer_end" --events good.jsonl --mp-root-end x)
replay(0 "usage: cbt replay" --help)
replay(0 "" --events good.jsonl --mp-root-end request_end --spans -)
replay(1 "cannot read the event file 'missing.jsonl'" --events missing.jsonl)
replay(1 "cannot write the span file '/nonexistent-dir/x.jsonl'" --events good.jsonl
       --spans /nonexistent-dir/x.jsonl)
# transfer_end: the deferred root ends at the last store END; request_end at
# its MP_REQUEST_END
execute_process(COMMAND ${CBT} replay --events good.jsonl --mp-root-end transfer_end
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${D})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--mp-root-end transfer_end: exit ${rc}\n${err}")
endif()
if(NOT out MATCHES "\"name\":\"request\"[^\n]*\"end_ns\":${T}00000009")
  message(FATAL_ERROR "--mp-root-end transfer_end: the root does not end at the last END:\n${out}")
endif()
execute_process(COMMAND ${CBT} replay --events good.jsonl --mp-root-end request_end
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${D})
if(NOT rc EQUAL 0 OR out MATCHES "\"name\":\"request\"[^\n]*\"end_ns\":${T}00000009")
  message(FATAL_ERROR "--mp-root-end request_end: exit ${rc} or the root ends at the last END:\n${out}")
endif()

# ---- bad input: one case per kind of problem ------------------------------------------
set(E "\"type\": \"mp.store.start\", \"ts_ns\": 5")
bad("not valid JSON: column 1: unexpected 'x'" "x")
bad("not valid JSON: column 13: string not terminated" "{\"type\": 1, \"ts")
bad("not valid JSON: column [0-9]+: trailing comma" "{${E},}")
bad("not valid JSON: column [0-9]+: duplicate member name \"ts_ns\"" "{${E}, \"ts_ns\": 6}")
string(ASCII 255 ff)
bad("not valid JSON: column [0-9]+: invalid UTF-8" "{${E}, \"session\": \"${ff}\"}")
bad("a line must be a JSON object, not a list" "[1]")
bad("no \"type\" field" "{\"ts_ns\": 5}")
bad("no \"ts_ns\" field" "{\"type\": \"mp.store.start\"}")
bad("unknown event type \"mp.nope\"" "{\"type\": \"mp.nope\", \"ts_ns\": 5}")
bad("\"type\" must be a string, not an integer" "{\"type\": 7, \"ts_ns\": 5}")
bad("\"ts_ns\" must be an integer of nanoseconds, not a number" "{\"type\": \"mp.store.start\", \"ts_ns\": 1.5}")
bad("\"ts_ns\" must be an integer of nanoseconds, not a string" "{\"type\": \"mp.store.start\", \"ts_ns\": \"5\"}")
bad("\"ts_ns\" must be positive" "{\"type\": \"mp.store.start\", \"ts_ns\": -5}")
bad("\"ts_ns\" must be an integer of nanoseconds, not an integer outside 64 bits"
    "{\"type\": \"mp.store.start\", \"ts_ns\": 99999999999999999999}")
bad("unknown field \"sesion\"" "{${E}, \"sesion\": \"a\"}")
bad("\"session\" must be a string, not null" "{${E}, \"session\": null}")
bad("\"session\" is 64 bytes: a cbt session id holds at most 63"
    "{${E}, \"session\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}")
bad("\"pair\" must be a non-negative integer" "{${E}, \"pair\": -1}")
bad("\"pair\" must be a non-negative integer" "{${E}, \"pair\": 1.0}")
bad("\"traceparent\" is not a W3C traceparent" "{${E}, \"traceparent\": \"00-abc\"}")
bad("\"meta\" must be an object, not a list" "{${E}, \"meta\": [1]}")
# a list of lists is no array (before arrays: no list at all)
bad("meta.keys(\\[0\\])?: a list cannot be" "{${E}, \"meta\": {\"keys\": [[1, 2]]}}")
bad("meta.ids\\[1\\]: a string in a list of ints: an array holds one type"
    "{${E}, \"meta\": {\"ids\": [1, \"a\"]}}")
bad("meta.ids\\[0\\]: null cannot be an array element" "{${E}, \"meta\": {\"ids\": [null]}}")
bad("meta.ids\\[2\\]: an integer outside 64 bits cannot be an array element"
    "{${E}, \"meta\": {\"ids\": [1, 2, 18446744073709551616]}}")
bad("meta.snapshot: an object cannot be held by a cbt event" "{${E}, \"meta\": {\"snapshot\": {}}}")
bad("meta.worker_id: null cannot be held by a cbt event" "{${E}, \"meta\": {\"worker_id\": null}}")
bad("meta.n: an integer outside 64 bits cannot be held" "{${E}, \"meta\": {\"n\": 18446744073709551616}}")
bad("meta.s: a string holding a NUL character" "{${E}, \"meta\": {\"s\": \"a\\u0000b\"}}")
bad("meta: an empty key" "{${E}, \"meta\": {\"\": 1}}")
bad("meta.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...: a key longer than 63 bytes"
    "{${E}, \"meta\": {\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\": 1}}")
# the event limits (cbt/event.h): a model name fits whole; a string past
# CBT_META_STR_MAX is kept cut, with the mark, and counted; more than
# CBT_EVENT_META_MAX values is refused
file(WRITE ${D}/names.jsonl "{\"type\": \"mp.request.start\", \"ts_ns\": 5, \"session\": \"r\"}
{\"type\": \"mp.lookup_prefetch.start\", \"ts_ns\": 6, \"session\": \"r\"}
{\"type\": \"mp.lookup_prefetch.end\", \"ts_ns\": 7, \"session\": \"r\", \"meta\": {\"model_name\": \"meta-llama/Llama-3.1-8B-Instruct\"}}
{\"type\": \"mp.request.end\", \"ts_ns\": 8, \"session\": \"r\"}
")
replay(0 "0 values dropped, 0 strings truncated" --events names.jsonl --spans names-spans.jsonl)
file(READ ${D}/names-spans.jsonl out)
if(NOT out MATCHES "\"model_name\":\"meta-llama/Llama-3.1-8B-Instruct\"")
  message(FATAL_ERROR "the 32-byte model name did not reach the span whole:\n${out}")
endif()
string(REPEAT "t" 3000 trace)
file(WRITE ${D}/trunc.jsonl "{\"type\": \"timeout.raised\", \"ts_ns\": 5, \"meta\": {\"stacktrace\": \"${trace}\"}}\n")
replay(0 "1 strings truncated" --events trunc.jsonl --spans trunc-spans.jsonl)
file(READ ${D}/trunc-spans.jsonl out)
if(NOT out MATCHES "tttt\\.\\.\\.\\[truncated\\]")
  message(FATAL_ERROR "the cut stack trace does not end in the mark:\n${out}")
endif()
set(many "")
foreach(k RANGE 1 300)
  string(APPEND many "\"k${k}\": ${k}, ")
endforeach()
bad("meta.k[0-9]+: too many values: a cbt event holds [0-9]+ \\(CBT_ERR_META_FULL"
    "{${E}, \"meta\": {${many}\"last\": 0}}")

# a line over 1 MiB: named, its bytes never stored
string(REPEAT "x" 4194305 long)
file(WRITE ${D}/long.jsonl "{\"type\": \"mp.request.start\", \"ts_ns\": 5, \"session\": \"a\"}\n${long}\n")
replay(2 "long.jsonl:2: line longer than 4194304 bytes" --events long.jsonl)

# the first bad line stops the replay; the spans before it are written
file(WRITE ${D}/stop.jsonl
"{\"type\": \"mp.request.start\", \"ts_ns\": 5, \"session\": \"a\"}
{\"type\": \"mp.request.end\", \"ts_ns\": 6, \"session\": \"a\"}
{\"type\": \"oops\", \"ts_ns\": 7}
{\"type\": \"bad\", \"ts_ns\": 8}
{\"type\": \"mp.request.start\", \"ts_ns\": 9, \"session\": \"b\"}
")
replay(2 "stop.jsonl:3: unknown event type \"oops\"" --events stop.jsonl --spans stop-spans.jsonl)
if(ERR MATCHES "stop.jsonl:4" OR NOT ERR MATCHES "3 lines, 2 events read, 2 published")
  message(FATAL_ERROR "the replay did not stop at line 3:\n${ERR}")
endif()
file(STRINGS ${D}/stop-spans.jsonl lines)
list(LENGTH lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "stop-spans.jsonl has ${n} spans, expected the one before the bad line")
endif()
# --keep-going: each bad line named and skipped, the good ones replayed, exit 2
replay(2 "stop.jsonl:4: unknown event type \"bad\"" --events stop.jsonl --keep-going)
if(NOT ERR MATCHES "5 lines, 3 events read, 3 published, 0 refused, 2 lines skipped"
   OR NOT ERR MATCHES "2 lines skipped\n")
  message(FATAL_ERROR "--keep-going did not count the skipped lines:\n${ERR}")
endif()
string(REGEX MATCHALL "\"name\":\"request\"" roots "${OUT}")
list(LENGTH roots n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "--keep-going: ${n} request spans, expected 2 (b ends at shutdown)\n${OUT}")
endif()
# --keep-going with nothing bad exits 0
replay(0 "0 lines skipped" --events good.jsonl --keep-going --spans -)

# --drop-unfit: the event is published without what does not fit, counted per key
file(WRITE ${D}/unfit.jsonl
"{\"type\": \"mp.store.start\", \"ts_ns\": 5, \"session\": \"a\", \"meta\": {\"device\": \"cuda:0\", \"model_name\": \"meta-llama/Llama-3.1-8B-Instruct\", ${many}\"z\": 1}}
{\"type\": \"mp.store.end\", \"ts_ns\": 6, \"session\": \"a\", \"meta\": {\"model_name\": \"meta-llama/Llama-3.1-8B-Instruct\"}}
{\"type\": \"mp.request.end\", \"ts_ns\": 7, \"session\": \"a\"}
")
replay(0 "2 events read|3 events read" --events unfit.jsonl --drop-unfit --dropped unfit-dropped.jsonl)
if(NOT ERR MATCHES "3 events read, 3 published, 0 refused, 0 lines skipped, [1-9][0-9]* values dropped"
   OR NOT ERR MATCHES "dropped values by key:[^\n]* k15=1"
   OR NOT OUT MATCHES "\"name\":\"mp.store\"[^\n]*\"device\":\"cuda:0\"[^\n]*\"model_name\":\"meta-llama/Llama-3.1-8B-Instruct\"")
  message(FATAL_ERROR "--drop-unfit:\n${OUT}\n${ERR}")
endif()
file(STRINGS ${D}/unfit-dropped.jsonl dropped)
list(GET dropped 0 first)
string(JSON key GET "${first}" key)
string(JSON line GET "${first}" line)
string(JSON why GET "${first}" why)
string(JSON type GET "${first}" type)
# the 16 values an event holds are device, model_name, k1..k14: k15 is the first dropped
if(NOT key STREQUAL "k15" OR NOT line EQUAL 1 OR NOT why STREQUAL "full"
   OR NOT type STREQUAL "mp.store.start")
  message(FATAL_ERROR "--dropped: unexpected lines:\n${dropped}")
endif()
replay(2 "--dropped is given without --drop-unfit" --events unfit.jsonl --dropped x.jsonl)
# ... but a value no cbt event can hold is still refused
file(WRITE ${D}/unfit2.jsonl "{${E}, \"meta\": {\"keys\": [[1]]}}\n")
replay(2 "unfit2.jsonl:1: meta.keys(\\[0\\])?: a list cannot be" --events unfit2.jsonl --drop-unfit)

# JSON lists are array values (ints, floats, bools, strings, empty); with
# --token-trace an mp.lookup carrying token_ids makes one mp.request.trace
file(WRITE ${D}/arrays.jsonl
  "{\"type\": \"mp.request.start\", \"ts_ns\": 10, \"session\": \"t\"}\n"
  "{\"type\": \"mp.lookup\", \"ts_ns\": 11, \"session\": \"t\", \"meta\": {\"model_name\": \"m\", "
  "\"token_ids\": [128000, 9906, 0], \"f\": [0.5, 1e3], \"b\": [true, false], \"dtypes\": [\"bf16\"], "
  "\"e\": []}}\n"
  "{\"type\": \"mp.request.end\", \"ts_ns\": 12, \"session\": \"t\"}\n")
replay(0 "3 published.*token traces 1" --events arrays.jsonl --spans arrays-spans.jsonl --token-trace)
file(READ ${D}/arrays-spans.jsonl spans)
if(NOT spans MATCHES "\"name\":\"mp.request.trace\"")
  message(FATAL_ERROR "--token-trace: no mp.request.trace span:\n${spans}")
endif()
replay(0 "token traces 0" --events arrays.jsonl --spans arrays-spans.jsonl)

# blank lines are no events; random bytes end in an error, not a crash
file(WRITE ${D}/blank.jsonl "\n   \n\t\r\n")
replay(0 "3 lines, 0 events read" --events blank.jsonl)
string(RANDOM LENGTH 4000 ALPHABET "{}[]\":,0123456789.eE-+tfnul\\ abc" SEED 7 junk)
string(REGEX REPLACE "(.......................................)" "\\1\n" junk "${junk}")
file(WRITE ${D}/junk.jsonl "${junk}")
replay(2 "junk.jsonl:[0-9]+: " --events junk.jsonl --keep-going)
