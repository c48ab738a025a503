/*
 * cmd_serve.c - `vllmc serve [MODEL] [options]`: the OpenAI-compatible server
 * (vLLM's `vllm serve`), same flag names.
 *
 * Start-up: tokenizer, engine (its flags are shared with generate, see
 * engine_args.h), metrics (src/metrics: fed by the frontend's step observer
 * on the output thread and by the HTTP layer; the engine loop pays nothing),
 * request tracing when --otlp-traces-endpoint is given (metrics/tracing.h:
 * spans from the metrics' records, through the metrics observer),
 * chat template, the frontend's engine and output threads, then the HTTP
 * server. SIGINT/SIGTERM are blocked in every thread and taken
 * by sigwait() here, so shutdown runs in plain code: refuse new requests,
 * abort the live ones (clients get finish_reason "abort" and their KV blocks
 * are freed), let responses drain, stop HTTP, join the threads.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/engine_args.h"
#include "cli/lora_args.h"
#include "cli/model_alias.h"
#include "dist/tp_executor.h"
#include "dist/api_servers.h"
#include "dist/dp_client.h"
#include "dist/dp_lora.h"
#include "dist/metrics_link.h"
#include "engine/engine.h"
#include "engine/grammar_cache.h"
#include "metrics/metrics.h"
#include "metrics/tracing.h"
#include "server/api_server.h"
#include "server/serving.h"
#include "server/tool_parser.h"
#include "template/chat_template.h"

#define MAX_NAMES 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc serve [MODEL] [options]\n"
            "Start the OpenAI-compatible API server (default model: the bundled stories260K).\n"
            "MODEL: a Hugging Face directory, a .gguf file, or smollm2 / gemma3, the real chat\n"
            "models scripts/fetch_models.sh downloads (served under that name, with their template).\n"
            "server options:\n"
            "  --host HOST                     address to bind (default: all interfaces)\n"
            "  --port PORT                     port (8000)\n"
            "  --uds PATH                      serve on this Unix domain socket instead\n"
            "  --ssl-keyfile FILE              HTTPS: the server's private key (PEM)\n"
            "  --ssl-certfile FILE             HTTPS: the server's certificate chain (PEM)\n"
            "  --ssl-ca-certs FILE             CA certificates that client certificates must chain to\n"
            "  --ssl-cert-reqs N               client certificates: 0 none (default), 1 optional\n"
            "                                  (verified if sent), 2 required\n"
            "  --served-model-name NAME [NAME ...]  names the API accepts (default: MODEL)\n"
            "  --api-key KEY [KEY ...]         require 'Authorization: Bearer KEY' on /v1/*\n"
            "                                  (also VLLM_API_KEY)\n"
            "  --chat-template FILE|TEMPLATE   chat template (default: the model's, from\n"
            "                                  tokenizer_config.json or the GGUF metadata)\n"
            "  --trust-request-chat-template   allow chat_template in requests\n"
            "  --response-role ROLE            role of generated chat messages (assistant)\n"
            "  --enable-auto-tool-choice       tool_choice \"auto\": parse the model's own tool calls\n"
            "  --tool-call-parser NAME         their format: hermes | llama3_json (docs/tool_calling.md)\n"
            "  --reasoning-parser NAME         split <think>...</think> into reasoning_content:\n"
            "                                  qwen3 | deepseek_r1\n"
            "  --max-logprobs N                most logprobs a request may ask for (20)\n"
            "  --enable-force-include-usage    usage chunk on every stream\n"
            "  --enable-log-requests           log each request's parameters\n"
            "  --enable-log-outputs            with --enable-log-requests: log each response\n"
            "  --max-log-len N                 prompt/output characters and ids logged (all)\n"
            "  --enable-prompt-tokens-details  usage.prompt_tokens_details.cached_tokens\n"
            "  --return-tokens-as-token-ids    logprob tokens as \"token_id:N\" unless a request says\n"
            "  --allowed-origins JSON          CORS: allowed origins, a JSON list (default [\"*\"])\n"
            "  --allowed-methods JSON          CORS: allowed methods (default [\"*\"])\n"
            "  --allowed-headers JSON          CORS: allowed headers (default [\"*\"])\n"
            "  --allow-credentials             CORS: allow credentials\n"
            "  --enable-request-id-headers     X-Request-Id on every response\n"
            "  --disable-uvicorn-access-log    no access log line per request\n"
            "  --max-request-body-bytes SIZE   larger request bodies get 413 (32M)\n"
            "  --api-server-threads N          HTTP polling threads (2)\n"
            "  --disable-log-stats             no periodic stats log line (every\n"
            "                                  VLLM_LOG_STATS_INTERVAL s, default 10)\n"
            "  --show-hidden-metrics-for-version X.Y  also export the metrics deprecated\n"
            "                                  after X.Y (0.10: the hidden ones, see docs/metrics.md)\n"
            "  --max-num-queued-reqs N         sequences queued or running (n counts n) beyond which\n"
            "                                  requests get 503 + Retry-After (1024; 0 = unbounded)\n"
            "  --otlp-traces-endpoint URL      export an OpenTelemetry span per request (OTLP/HTTP\n"
            "                                  protobuf; no path: /v1/traces), W3C traceparent honoured;\n"
            "                                  OTEL_* variables as the OpenTelemetry SDK (docs/tracing.md)\n"
            "  --collect-detailed-traces LIST  accepted (needs --otlp-traces-endpoint); adds nothing\n");
    engine_args_usage(f);
    fputs(dp_client_usage(), f);
}

/* Flags vLLM has that change nothing here; accepted so scripts keep working. */
static bool ignored_flag(const char *name, bool *takes_value) {
    static const char *const no_value[] = {
        "--enable-server-load-tracking", "--disable-fastapi-docs", "--enable-chunked-prefill", "--disable-frontend-multiprocessing",
        "--trust-remote-code", "--enforce-eager", NULL};
    static const char *const with_value[] = {"--uvicorn-log-level", "--dtype", "--swap-space",
                                             "--gpu-memory-utilization", "--tensor-parallel-size",
                                             "-tp", NULL};
    for (const char *const *f = no_value; *f; f++)
        if (!strcmp(name, *f)) return (*takes_value = false), true;
    for (const char *const *f = with_value; *f; f++)
        if (!strcmp(name, *f)) return (*takes_value = true), true;
    return false;
}

/* A JSON list of strings (vLLM parses --allowed-* with json.loads): *out
 * (caller json_decref's) and the strings into list (cap MAX_NAMES). */
static bool parse_json_list(const char *flag, const char *val, json_t **out, const char **list, int *n) {
    json_error_t err;
    json_t *j = json_loads(val, 0, &err);
    size_t i;
    json_t *v;
    if (!json_is_array(j) || json_array_size(j) > MAX_NAMES) goto bad;
    json_array_foreach(j, i, v) {
        if (!json_is_string(v)) goto bad;
        if (list) list[i] = json_string_value(v);
    }
    if (n) *n = (int)json_array_size(j);
    if (out) *out = j;
    else json_decref(j);
    return true;
bad:
    fprintf(stderr, "vllmc serve: argument %s: invalid value '%s' (a JSON list of at most %d strings, "
            "e.g. '[\"*\"]')\n", flag, val, MAX_NAMES);
    json_decref(j);
    return false;
}

/* The same for data-parallel engines: each engine's steps into its metrics. */
static void observe_engine_step(void *ud, int32_t engine_index, const vllm_step_output *out) {
    metrics_on_engine_step(ud, engine_index, out, vllm_monotonic_time());
}

/* The frontend's step observer (output thread): one engine step into the metrics. */
static void observe_step(void *ud, const vllm_step_output *out) {
    metrics_on_step(ud, out, vllm_monotonic_time());
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[8192];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (buf_grow((void **)&buf, &cap, len + n + 1, 1) != VLLM_OK) {
            free(buf);
            fclose(f);
            return NULL;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf) buf = calloc(1, 1);
    else buf[len] = 0;
    return buf;
}

int cmd_serve(int argc, char **argv) {
    vllm_engine_args ea;
    vllm_engine_args_init(&ea);
    ea.max_num_seqs = 128;            /* vLLM's CPU server defaults */
    ea.max_num_batched_tokens = 2048;
    const char *host = NULL, *chat_template_arg = NULL, *role = "assistant";
    const char *uds = NULL, *ssl_keyfile = NULL, *ssl_certfile = NULL, *ssl_ca_certs = NULL;
    int ssl_cert_reqs = 0;
    int port = 8000, http_threads = 2;
    const char *names[MAX_NAMES], *keys[MAX_NAMES];
    int num_names = 0, num_keys = 0;
    int32_t max_logprobs = VLLM_MAX_LOGPROBS;
    int64_t max_body = 32 << 20;
    int64_t max_queued = 1024;
    bool auto_tools = false;
    const char *tool_parser_name = NULL, *reasoning_parser_name = NULL;
    bool trust_template = false, force_usage = false, log_requests = false, access_log = true;
    bool log_stats = true;
    bool allow_credentials = false, request_id_headers = false, log_outputs = false;
    bool prompt_tokens_details = false, tokens_as_ids = false;
    int32_t max_log_len = -1;
    const char *cors_arg[3] = {NULL, NULL, NULL}; /* --allowed-origins, -methods, -headers */
    json_t *cors_json[3] = {NULL, NULL, NULL};
    const char *cors_list[3][MAX_NAMES];
    int cors_num[3] = {0, 0, 0};
    const char *hidden_version = NULL;
    const char *otlp_endpoint = NULL, *detailed_traces = NULL;
    dp_config dpc;
    dp_client_config_init(&dpc);

    for (int i = 1; i < argc;) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        int rc = engine_args_parse(&ea, argc, argv, &i);
        if (rc < 0) return 2;
        if (rc > 0) continue;
        if ((rc = dp_client_parse_flag(&dpc, argc, argv, &i)) != 0) {
            if (rc < 0) return 2;
            continue;
        }
        char name[64];
        const char *val = engine_args_flag_name(a, name, sizeof name);
        bool takes;
        if (a[0] != '-') {
            if (ea.model && ea.model != a) {
                fprintf(stderr, "vllmc serve: unrecognized arguments: %s\n", a);
                return 2;
            }
            ea.model = a;
            i++;
            continue;
        }
        /* list-valued flags: NAME [NAME ...] */
        if (!strcmp(name, "--served-model-name") || !strcmp(name, "--api-key")) {
            const char **list = name[2] == 's' ? names : keys;
            int *num = name[2] == 's' ? &num_names : &num_keys;
            int before = *num;
            if (val && *num < MAX_NAMES) list[(*num)++] = val;
            for (i++; !val && i < argc && argv[i][0] != '-' && *num < MAX_NAMES; i++) list[(*num)++] = argv[i];
            if (*num == before) {
                fprintf(stderr, "vllmc serve: argument %s: expected at least one argument\n", name);
                return 2;
            }
            continue;
        }
        bool flag_only = !strcmp(name, "--trust-request-chat-template") ||
                         !strcmp(name, "--enable-force-include-usage") ||
                         !strcmp(name, "--enable-log-requests") ||
                         !strcmp(name, "--disable-uvicorn-access-log") ||
                         !strcmp(name, "--disable-log-stats") ||
                         !strcmp(name, "--allow-credentials") ||
                         !strcmp(name, "--enable-log-outputs") ||
                         !strcmp(name, "--return-tokens-as-token-ids") ||
                         !strcmp(name, "--enable-prompt-tokens-details") ||
                         !strcmp(name, "--enable-request-id-headers");
        if (!strcmp(name, "--enable-auto-tool-choice")) {
            auto_tools = true;
            i++;
            continue;
        }
        if (flag_only) {
            if (name[2] == 't') trust_template = true;
            else if (!strcmp(name, "--allow-credentials")) allow_credentials = true;
            else if (!strcmp(name, "--enable-log-outputs")) log_outputs = true;
            else if (!strcmp(name, "--return-tokens-as-token-ids")) tokens_as_ids = true;
            else if (!strcmp(name, "--enable-prompt-tokens-details")) prompt_tokens_details = true;
            else if (!strcmp(name, "--enable-request-id-headers")) request_id_headers = true;
            else if (!strcmp(name, "--enable-force-include-usage")) force_usage = true;
            else if (!strcmp(name, "--enable-log-requests")) log_requests = true;
            else if (!strcmp(name, "--disable-log-stats")) log_stats = false;
            else access_log = false;
            i++;
            continue;
        }
        if (ignored_flag(name, &takes)) {
            i += takes && !val ? 2 : 1;
            continue;
        }
        static const char *const valued[] = {"--host", "--port", "--uds", "--ssl-keyfile", "--ssl-certfile",
                                             "--ssl-ca-certs", "--ssl-cert-reqs",
                                             "--chat-template", "--response-role",
                                             "--max-logprobs", "--max-request-body-bytes",
                                             "--api-server-threads",
                                             "--show-hidden-metrics-for-version", "--max-num-queued-reqs",
                                             "--otlp-traces-endpoint", "--collect-detailed-traces",
                                             "--allowed-origins", "--allowed-methods", "--allowed-headers",
                                             "--max-log-len", "--tool-call-parser", "--reasoning-parser", NULL};
        bool known = false;
        for (const char *const *f = valued; *f; f++) known |= !strcmp(name, *f);
        if (!known) {
            fprintf(stderr, "vllmc serve: unrecognized arguments: %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vllmc serve: argument %s: expected one argument\n", name);
                return 2;
            }
            val = argv[++i];
        }
        i++;
        int64_t num = 0;
        if (!strcmp(name, "--host")) host = val;
        else if (!strcmp(name, "--uds")) uds = val;
        else if (!strcmp(name, "--ssl-keyfile")) ssl_keyfile = val;
        else if (!strcmp(name, "--ssl-certfile")) ssl_certfile = val;
        else if (!strcmp(name, "--ssl-ca-certs")) ssl_ca_certs = val;
        else if (!strcmp(name, "--chat-template")) chat_template_arg = val;
        else if (!strcmp(name, "--response-role")) role = val;
        else if (!strcmp(name, "--tool-call-parser")) tool_parser_name = val;
        else if (!strcmp(name, "--reasoning-parser")) reasoning_parser_name = val;
        else if (!strcmp(name, "--otlp-traces-endpoint")) otlp_endpoint = val;
        else if (!strcmp(name, "--collect-detailed-traces")) detailed_traces = val;
        else if (!strncmp(name, "--allowed-", 10)) {
            if (!parse_json_list(name, val, NULL, NULL, NULL)) return 2;
            cors_arg[name[10] == 'o' ? 0 : name[10] == 'm' ? 1 : 2] = val;
        }
        else if (!strcmp(name, "--show-hidden-metrics-for-version")) {
            bool show;
            if (metrics_parse_hidden_version(val, &show) != VLLM_OK) {
                fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
                return 2;
            }
            hidden_version = val;
        }
        else if (!engine_args_parse_size(val, &num)) {
            fprintf(stderr, "vllmc serve: argument %s: invalid value '%s'\n", name, val);
            return 2;
        } else if (!strcmp(name, "--port")) {
            if (num > 65535) {
                fprintf(stderr, "vllmc serve: argument --port: invalid value '%s'\n", val);
                return 2;
            }
            port = (int)num;
        } else if (!strcmp(name, "--max-logprobs")) {
            max_logprobs = num > VLLM_MAX_LOGPROBS ? VLLM_MAX_LOGPROBS : (int32_t)num;
        } else if (!strcmp(name, "--max-request-body-bytes")) {
            max_body = num;
        } else if (!strcmp(name, "--api-server-threads")) {
            http_threads = num < 1 ? 1 : num > 64 ? 64 : (int)num;
        } else if (!strcmp(name, "--max-num-queued-reqs")) {
            max_queued = num;
        } else if (!strcmp(name, "--ssl-cert-reqs")) {
            if (num > 2) {
                fprintf(stderr, "vllmc serve: argument --ssl-cert-reqs: invalid value '%s' "
                                "(0 = none, 1 = optional, 2 = required)\n", val);
                return 2;
            }
            ssl_cert_reqs = (int)num;
        } else if (!strcmp(name, "--max-log-len")) {
            max_log_len = num > INT32_MAX ? INT32_MAX : (int32_t)num;
        }
    }
    /* vLLM's validate_parsed_serve_args and --reasoning-parser's choices */
    tool_parser_kind tool_parser = TOOL_PARSER_NONE;
    reasoning_parser_kind reasoning_parser = REASONING_PARSER_NONE;
    if (auto_tools && !tool_parser_name) {
        fprintf(stderr, "vllmc serve: Error: --enable-auto-tool-choice requires --tool-call-parser\n");
        return 2;
    }
    if (tool_parser_name && !tool_parser_kind_from_name(tool_parser_name, &tool_parser)) {
        fprintf(stderr, "vllmc serve: invalid tool call parser: %s (chose from { hermes,llama3_json,llama4_json })\n",
                tool_parser_name);
        return 2;
    }
    if (reasoning_parser_name && !tool_parser_reasoning_from_name(reasoning_parser_name, &reasoning_parser)) {
        fprintf(stderr, "vllmc serve: argument --reasoning-parser: invalid choice: '%s' (choose from 'deepseek_r1', "
                        "'qwen3')\n", reasoning_parser_name);
        return 2;
    }
    if (detailed_traces) { /* vLLM's ObservabilityConfig check; the per-worker spans are V0's */
        if (!otlp_endpoint) {
            fprintf(stderr, "vllmc serve: collect_detailed_traces requires `--otlp-traces-endpoint` to be set.\n");
            return 2;
        }
        log_warn("--collect-detailed-traces %s: no extra spans here (the llm_request span already has "
                 "queue, prefill and decode children)", detailed_traces);
    }
    const char *env_key = getenv("VLLM_API_KEY");
    if (!num_keys && env_key && *env_key) keys[num_keys++] = env_key;
    static char model_dir[PATH_MAX];
    if (!ea.model) ea.model = realpath(cli_default_model_dir(), model_dir) ? model_dir : cli_default_model_dir();
    if (!num_names) names[num_names++] = ea.model; /* an alias (smollm2) is the served name as typed */
    if (model_alias_resolve(&ea.model, &chat_template_arg) != VLLM_OK ||
        model_alias_resolve(&ea.tokenizer, NULL) != VLLM_OK) {
        fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
        return 1;
    }
    const char *kv_env = getenv("VLLM_CPU_KVCACHE_SPACE");
    if (!ea.kv_cache_memory_bytes && !ea.num_gpu_blocks_override && kv_env && *kv_env)
        ea.kv_cache_memory_bytes = (int64_t)(atof(kv_env) * (double)(1LL << 30));

    /* --api-server-count N > 1 (dist/api_servers.h): this process supervises; its API servers come back here */
    int32_t api_index = api_servers_child_index();
    if (dpc.api_server_count > 1 && (ea.tensor_parallel_size > 1 || ea.pipeline_parallel_size > 1)) {
        fprintf(stderr, "vllmc serve: --api-server-count %d with -tp/-pp is not supported; use one API server\n",
                dpc.api_server_count);
        return 2;
    }
    if (dpc.api_server_count > 1 && !dpc.headless && api_index < 0)
        return api_servers_run(&dpc, argc, argv, host, port, uds);
    bool remote_engines = dpc.size > 1 || (api_index >= 0 && !dpc.headless);
    if (api_index >= 0 && !dpc.headless) { /* the supervisor started the engines */
        char prefix[48];
        snprintf(prefix, sizeof prefix, "(APIServer pid=%d) ", (int)getpid());
        log_set_prefix(prefix);
        dpc.size_local = 0;
        dpc.rpc_port += api_index;
    }

    /* -tp / -pp: join the MPI group (or start it under mpirun and wait); a worker rank ends here */
    mpi_group *group = NULL;
    if (ea.tensor_parallel_size > 1 || ea.pipeline_parallel_size > 1) {
        int worker_status = 0;
        if (tp_executor_start(&ea, argc, argv, &group, &worker_status) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            return 1;
        }
        if (!group) return worker_status;
    }
    if (dpc.headless) return dp_client_run_headless(&dpc, &ea, argc, argv, lora_args_load); /* engines only */

    /* Block the shutdown signals before any thread exists; main takes them with sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    log_info("vLLM API server version %s (vllm.c)", VLLMC_VERSION);
    log_info("non-default args: model='%s', host=%s, port=%d, served_model_name=%s", ea.model,
             host ? host : "None", port, names[0]);
    int status = 1;
    tokenizer *tok = NULL;
    vllm_engine *engine = NULL;
    dp_client *dpcl = NULL; /* -dp N > 1: engine processes instead of engine */
    dp_lora *dplora = NULL;             /* with engine processes and --enable-lora: the adapters' names */
    grammar_cache *own_grammars = NULL; /* with engine processes: the front end's, to check specs on admission */
    frontend *fe = NULL;
    metrics *mets = NULL;
    tracing *tracer = NULL;
    api_server *srv = NULL;
    char *template_src = NULL;
    chat_template *tmpl = NULL;
    json_t *tok_config = NULL;
    serving_ctx ctx = {0};
    vllm_status rc;
    if ((rc = tokenizer_load(ea.tokenizer ? ea.tokenizer : ea.model, &tok)) != VLLM_OK) {
        fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
        goto out;
    }
    vllm_engine_info info;
    vllm_sampling_params dsp;
    dp_hello hello;
    if (remote_engines) { /* data parallel: engine 0 tells what the engines were built with */
        if ((rc = dp_client_create(&dpc, argc, argv, &dpcl, &hello)) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
        info = hello.info;
        dsp = hello.defaults;
    } else {
        if ((rc = vllm_engine_create(&ea, &engine)) != VLLM_OK || (rc = lora_args_load(engine, &ea)) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
        vllm_engine_get_info(engine, &info);
        vllm_engine_default_sampling_params(engine, &dsp);
    }

    metrics_config mc;
    metrics_config_init(&mc);
    mc.model_name = names[0];
    mc.max_model_len = info.max_model_len;
    mc.show_hidden_metrics_for_version = hidden_version;
    mc.log_stats = log_stats;
    mc.block_size = info.block_size;
    mc.num_gpu_blocks_override = ea.num_gpu_blocks_override;
    mc.enable_prefix_caching = info.enable_prefix_caching;
    mc.kv_cache_memory_bytes = ea.kv_cache_memory_bytes; /* as configured; 0: None */
    mc.cache_dtype = info.kv_cache_dtype;                /* as configured: "auto", "fp8", ... */
    mc.num_gpu_blocks = info.num_gpu_blocks;
    mc.num_speculative_tokens = info.speculative_config.num_speculative_tokens;
    mc.max_loras = ea.enable_lora ? ea.max_loras : 0;
    mc.kv_connector = engine && engine_kv_connector_enabled(engine);
    if (otlp_endpoint && api_index >= 0) log_warn("--otlp-traces-endpoint: no traces with --api-server-count > 1");
    if ((rc = metrics_log_interval_from_env(&mc.log_stats_interval)) != VLLM_OK ||
        (rc = api_index >= 0 ? metrics_link_connect(api_servers_metrics_owner() ? api_servers_metrics_owner() : "",
                                                     api_index, &mc, &mets)
                             : metrics_create(&mc, &mets)) != VLLM_OK) {
        fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
        goto out;
    }
    for (int32_t k = 1; dpcl && k < dp_client_size(dpcl); k++) /* engine="k" series beside engine 0's */
        if ((rc = metrics_add_engine(mets, k, dp_client_num_gpu_blocks(dpcl, k))) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
    metrics_log_engine_initialized(mets);
    if (otlp_endpoint) { /* spans from the metrics' records: the observer hears every finish */
        tracing_config tc;
        if ((rc = tracing_config_from_env(&tc, otlp_endpoint)) != VLLM_OK ||
            (rc = tracing_create(&tc, &tracer)) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
        metrics_set_observer(mets, &(metrics_observer){tracing_sequence_finished, tracing_request_released,
                                                       tracer});
    }

    openai_defaults_from_sampling(&dsp, &ctx.defaults);
    ctx.num_eos_ids = info.num_eos_token_ids < 8 ? info.num_eos_token_ids : 8;
    memcpy(ctx.eos_ids, info.eos_token_ids, (size_t)ctx.num_eos_ids * sizeof *ctx.eos_ids);
    /* before the engine moves to its thread: the cache is thread-safe */
    ctx.grammars = engine ? engine_grammar_cache(engine) : NULL;
    ctx.compile_timeout = engine ? engine_compile_timeout(engine) : 5.0;
    ctx.kv_engine_id = engine ? engine_kv_engine_id(engine) : NULL;
    ctx.kv_host = engine ? engine_kv_server(engine, &ctx.kv_port) : NULL;
    if (!engine && remote_engines) { /* engines in other processes compile their own; this one checks at admission */
        grammar_cache_config gc = {.tokenizer = ea.tokenizer ? ea.tokenizer : ea.model, .num_threads = 1,
                                   .num_eos = info.num_eos_token_ids < GRAMMAR_CACHE_MAX_EOS
                                                  ? info.num_eos_token_ids : GRAMMAR_CACHE_MAX_EOS};
        memcpy(gc.eos_ids, info.eos_token_ids, (size_t)gc.num_eos * sizeof *gc.eos_ids);
        if (grammar_cache_create(&gc, &own_grammars) == VLLM_OK) ctx.grammars = own_grammars;
        double t = ea.structured_outputs_compile_timeout;
        ctx.compile_timeout = t > 0 ? t : 5.0;
    }
    if (!ctx.grammars) log_warn("structured outputs are unavailable: %s", vllm_errmsg());
    if (strcmp(ea.generation_config, "vllm"))
        log_info("Default sampling parameters have been overridden by the model's Hugging Face "
                 "generation config recommended from the model creator. If this is not intended, "
                 "please relaunch vLLM instance with `--generation-config vllm`.");

    /* chat template: --chat-template (a file, else a literal template), else
     * the model's (tokenizer_config.json, or the GGUF file's metadata) */
    if (chat_template_arg) {
        template_src = read_file(chat_template_arg);
        if (!template_src) {
            if (!strpbrk(chat_template_arg, "{}\n")) {
                fprintf(stderr, "vllmc serve: The supplied chat template string (%s) appears "
                                "path-like, but doesn't exist!\n", chat_template_arg);
                goto out;
            }
            template_src = strdup(chat_template_arg);
        }
    }
    /* tokenizer_config.json, or what a GGUF file's metadata says (its chat template(s)) */
    if ((rc = tokenizer_load_config(ea.tokenizer ? ea.tokenizer : ea.model, &tok_config)) != VLLM_OK) {
        fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
        goto out;
    }
    rc = chat_template_create(tok_config, template_src, &tmpl);
    if (rc == VLLM_ERR_NOT_FOUND) {
        log_warn("No chat template found (%s); /v1/chat/completions will refuse requests.", vllm_errmsg());
    } else if (rc != VLLM_OK) {
        fprintf(stderr, "vllmc serve: chat template: %s\n", vllm_errmsg());
        goto out;
    } else {
        log_info("Using %s chat template (content format: %s)", template_src ? "the supplied" : "the model's",
                 chat_template_content_format(tmpl) == CHAT_CONTENT_OPENAI ? "openai" : "string");
    }

    vllm_engine *local_engine = engine; /* NULL with data-parallel engines; its LoRA calls are thread-safe */
    if (dpcl && ea.enable_lora) { /* the engines loaded --lora-modules; runtime updates go to all of them */
        const lora_args_module *mods;
        int nm = lora_args_modules(&mods);
        rc = dp_lora_create(dpcl, &dplora);
        for (int k = 0; rc == VLLM_OK && k < nm; k++) rc = dp_lora_add(dplora, mods[k].name, mods[k].path);
        if (rc != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
        ctx.lora_ops = dp_lora_ops();
        ctx.lora_ud = dplora;
    }
    if (dpcl) {
        if ((rc = frontend_create_ops(dp_client_ops(), dpcl, tok, &fe)) != VLLM_OK) {
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
        dpcl = NULL; /* the frontend's engine thread owns it now */
        frontend_set_engine_step_observer(fe, observe_engine_step, mets);
    } else {
        vllm_engine *eng = engine;
        engine = NULL; /* the frontend's engine thread owns it now */
        if ((rc = frontend_create(eng, tok, &fe)) != VLLM_OK) {
            engine = eng;
            fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
            goto out;
        }
        frontend_set_step_observer(fe, observe_step, mets);
    }
    ctx.fe = fe;
    ctx.metrics = mets;
    ctx.tracing = tracer;
    ctx.tok = tok;
    ctx.chat_template = tmpl;
    ctx.tokenizer_config = tok_config;
    ctx.served_names = names;
    ctx.num_served_names = num_names;
    ctx.model_root = ea.model;
    ctx.lora_engine = ea.enable_lora ? local_engine : NULL;
    ctx.lora_parent = lora_args_base_model_name;
    const char *rt_lora = getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
    ctx.allow_runtime_lora = rt_lora && (!strcmp(rt_lora, "1") || !strcasecmp(rt_lora, "true"));
    ctx.max_model_len = info.max_model_len;
    ctx.max_logprobs = max_logprobs;
    ctx.max_num_queued_reqs = max_queued;
    atomic_init(&ctx.num_queued_seqs, 0);
    ctx.policy = info.scheduling_policy;
    ctx.trust_request_chat_template = trust_template;
    ctx.enable_force_include_usage = force_usage;
    ctx.response_role = role;
    ctx.enable_auto_tool_choice = auto_tools;
    ctx.tool_call_parser = (int)tool_parser;
    ctx.reasoning_parser = (int)reasoning_parser;
    ctx.log_requests = log_requests;
    ctx.log_outputs = log_requests && log_outputs; /* vLLM logs outputs through the request logger */
    ctx.max_log_len = max_log_len;
    ctx.enable_prompt_tokens_details = prompt_tokens_details;
    ctx.return_tokens_as_token_ids = tokens_as_ids;
    atomic_init(&ctx.server_load, 0);

    for (int k = 0; k < 3; k++)
        if (cors_arg[k] && !parse_json_list("--allowed-*", cors_arg[k], &cors_json[k], cors_list[k], &cors_num[k]))
            goto out;
    api_server_config sc = {
        .allowed_origins = cors_list[0],
        .num_allowed_origins = cors_num[0],
        .allowed_methods = cors_list[1],
        .num_allowed_methods = cors_num[1],
        .allowed_headers = cors_list[2],
        .num_allowed_headers = cors_num[2],
        .allow_credentials = allow_credentials,
        .enable_request_id_headers = request_id_headers,
        .host = host,
        .port = port,
        .uds = uds,
        .ssl_keyfile = ssl_keyfile,
        .ssl_certfile = ssl_certfile,
        .ssl_ca_certs = ssl_ca_certs,
        .ssl_cert_reqs = ssl_cert_reqs,
        .api_keys = keys,
        .num_api_keys = num_keys,
        .max_body_bytes = (size_t)max_body,
        .num_http_threads = http_threads,
        .access_log = access_log,
    };
    if ((rc = serving_responses_init(&ctx)) != VLLM_OK || (rc = api_server_start(&ctx, &sc, &srv)) != VLLM_OK) {
        fprintf(stderr, "vllmc serve: %s\n", vllm_errmsg());
        goto out;
    }
    if (uds)
        log_info("Starting vLLM API server 0 on %s+unix:%s", ssl_keyfile ? "https" : "http", uds);
    else
        log_info("Starting vLLM API server %d on %s://%s:%d", api_index > 0 ? api_index : 0,
                 ssl_keyfile ? "https" : "http", host && *host ? host : "0.0.0.0", api_server_port(srv));
    log_info("Application startup complete.");
    if (metrics_logger_start(mets) != VLLM_OK) log_warn("%s; no stats log line", vllm_errmsg());

    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("Shutting down (%s)", sig == SIGINT ? "SIGINT" : "SIGTERM");
    frontend_begin_shutdown(fe);
    if (!frontend_wait_idle(fe, 5.0)) log_warn("Some requests did not finish within 5 s.");
    api_server_stop(srv, 5.0);
    srv = NULL;
    log_info("Application shutdown complete.");
    status = 0;
out:
    api_server_stop(srv, 1.0);
    if (!serving_beam_wait(&ctx, 10.0)) log_warn("a beam search did not end within 10 s of the shutdown");
    frontend_free(fe);
    serving_responses_free(&ctx); /* after the output thread, which may still store a response */
    grammar_cache_free(own_grammars); /* after every call (each held a reference while it ran) */
    dp_lora_free(dplora);             /* after the HTTP threads, its only callers */
    metrics_free(mets); /* after everything that feeds it */
    tracing_free(tracer); /* after the metrics, its only caller; sends what is queued */
    vllm_engine_free(engine);
    dp_client_free(dpcl);
    chat_template_free(tmpl);
    json_decref(tok_config);
    for (int k = 0; k < 3; k++) json_decref(cors_json[k]);
    free(template_src);
    tokenizer_free(tok);
    tp_executor_finish(group, status); /* after the engine: its executor talks to the group until freed */
    return status;
}
