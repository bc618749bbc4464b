# tests/cli_flags.cmake — the cbt command's refusals: usage errors exit 2 with
# the problem named; a good run exits 0 and writes its span file.
# Run by ctest as: cmake -DCBT=<path> -DWORKDIR=<dir> -P cli_flags.cmake
function(expect_exit code pattern)
  execute_process(COMMAND ${CBT} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err WORKING_DIRECTORY ${WORKDIR} TIMEOUT 60)
  if(NOT rc EQUAL ${code})
    message(FATAL_ERROR "cbt ${ARGN}: exit ${rc}, expected ${code}\n${out}\n${err}")
  endif()
  if(pattern AND NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "cbt ${ARGN}: output does not match '${pattern}':\n${out}\n${err}")
  endif()
endfunction()

expect_exit(2 "usage")
expect_exit(2 "unknown command 'frobnicate'" frobnicate)
expect_exit(2 "unknown option '--bogus'" demo --bogus)
expect_exit(2 "--requests: 'abc' is not an integer" demo --requests abc)
expect_exit(2 "--requests: '0' is not an integer" demo --requests 0)
expect_exit(2 "--requests: '-3' is not an integer" demo --requests -3)
expect_exit(2 "--concurrency needs a value" demo --concurrency)
expect_exit(2 "--concurrency: '999' is not an integer" demo --concurrency 999)
expect_exit(2 "--output needs a file name" demo --output)
expect_exit(2 "--enable-tracing requires --otlp-endpoint" demo --enable-tracing)
expect_exit(2 "--otlp-endpoint needs an http" demo --enable-tracing --otlp-endpoint ftp://x)
expect_exit(2 "without --enable-tracing" demo --otlp-endpoint http://127.0.0.1:9)
expect_exit(2 "--otlp-protocol: 'http' is not grpc, http/protobuf or http/json"
            demo --enable-tracing --otlp-endpoint http://127.0.0.1:9 --otlp-protocol http)
expect_exit(2 "--otlp-protocol: \\(no value\\)" demo --enable-tracing --otlp-endpoint
            http://127.0.0.1:9 --otlp-protocol)
expect_exit(2 "--otlp-protocol is given without --enable-tracing" demo --otlp-protocol grpc)
expect_exit(2 "--slowest: 'x' is not an integer" demo --slowest x)
expect_exit(0 "usage" --help)
expect_exit(2 "which recording\\? \\(cbt replay FILE.lct\\)" replay)
expect_exit(2 "unknown option '--nope'" replay --events x --nope)
expect_exit(0 "cbt [0-9]+\\.[0-9]+\\.[0-9]+" version)
expect_exit(1 "cannot write the trace file" demo --output /nonexistent-dir/x.json)
expect_exit(1 "cannot write the span file" demo --spans /nonexistent-dir/x.jsonl)
# an overlong value is malformed too: exit 2, the flag named
string(REPEAT "x" 1100 longhost)
expect_exit(2 "--otlp-endpoint: the URL is 1107 bytes, longer than 1012"
            demo --enable-tracing --otlp-endpoint http://${longhost})
# writes that fail are losses, not success: exit 1, the file and the count named
expect_exit(1 "the span file '/dev/full' lost [1-9][0-9]* spans"
            demo --requests 3 --cpu --trees 0 --slowest 0 --output cli-full-trace.json
            --spans /dev/full)
expect_exit(1 "cannot write the trace file '/dev/full'" demo --requests 3 --cpu --output /dev/full)
expect_exit(1 "the span file '/dev/full' lost [1-9][0-9]* spans"
            demo --cacheblend --requests 3 --trees 0 --slowest 0 --output cli-full-trace.json
            --spans /dev/full)

# OTLP to a collector that is not there: the summary gives the exporter's
# final figures (after the export cbt_shutdown ends), every span dropped
execute_process(COMMAND ${CMAKE_COMMAND} -E env OTEL_EXPORTER_OTLP_TIMEOUT=500
                        ${CBT} demo --requests 3 --cpu --trees 0 --slowest 0
                        --output cli-otlp-trace.json --spans cli-otlp-spans.jsonl
                        --enable-tracing --otlp-endpoint http://127.0.0.1:9
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORKDIR} TIMEOUT 60)
if(NOT "${err}" MATCHES "this build has no OTLP exporter")
  if(NOT rc EQUAL 1 OR NOT "${err}" MATCHES "the OTLP exporter dropped [1-9]")
    message(FATAL_ERROR "cbt demo, OTLP to a closed port: exit ${rc}, expected 1 and the "
                        "drops named\n${out}\n${err}")
  endif()
  if(NOT "${out}" MATCHES "\\| spans ([0-9]+) ")
    message(FATAL_ERROR "cbt demo, OTLP to a closed port: no span count\n${out}")
  endif()
  set(spans ${CMAKE_MATCH_1})
  if(NOT "${out}" MATCHES "OTLP: 0 spans exported to [^,]*, ([0-9]+) dropped")
    message(FATAL_ERROR "cbt demo, OTLP to a closed port: no OTLP line\n${out}")
  endif()
  if(NOT CMAKE_MATCH_1 EQUAL spans)
    message(FATAL_ERROR "cbt demo, OTLP to a closed port: ${CMAKE_MATCH_1} dropped, but "
                        "${spans} spans ended (all were lost)\n${out}")
  endif()
endif()
file(REMOVE ${WORKDIR}/cli-spans.jsonl ${WORKDIR}/cli-trace.json)
expect_exit(0 "requests 3" demo --requests 3 --concurrency 2 --output cli-trace.json
            --spans cli-spans.jsonl --trees 1 --cpu)
file(STRINGS ${WORKDIR}/cli-spans.jsonl lines)
list(LENGTH lines n)
if(n LESS 6)
  message(FATAL_ERROR "cli-spans.jsonl has ${n} lines, expected at least 6 (3 requests)")
endif()
file(READ ${WORKDIR}/cli-trace.json trace)
if(NOT trace MATCHES "\"traceEvents\"" OR NOT trace MATCHES "\"name\":\"request\"")
  message(FATAL_ERROR "cli-trace.json does not look like a trace file")
endif()

# --cacheblend: the three roles join one trace; the first tree shows the
# server's cb.lookup under the scheduler's cb.lookup.rpc and the server's
# cb.retrieve under the worker's cb.start_load_kv
expect_exit(2 "--cacheblend runs on the CPU backend" demo --cacheblend --gpu)
expect_exit(2 "--plant-queue plants on the MP demo's streams; drop --cacheblend"
            demo --cacheblend --plant-queue)
file(REMOVE ${WORKDIR}/cli-cb-spans.jsonl)
expect_exit(0 "cb.lookup.rpc[^\n]*\n[^\n]*cb.lookup  [^\n]*\n(.|\n)*cb.start_load_kv[^\n]*\n[^\n]*cb.retrieve "
            demo --cacheblend --requests 4 --trees 1 --slowest 0 --output cli-cb-trace.json
            --spans cli-cb-spans.jsonl)
file(STRINGS ${WORKDIR}/cli-cb-spans.jsonl cblines)
list(LENGTH cblines n)
if(n LESS 68)
  message(FATAL_ERROR "cli-cb-spans.jsonl has ${n} lines, expected at least 68 (4 requests)")
endif()
