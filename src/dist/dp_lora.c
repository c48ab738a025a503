/*
 * dp_lora.c - see dp_lora.h. The list is small (adapters, not requests):
 * an array under one mutex; an update holds no lock while the engines work.
 */
#include "dist/dp_lora.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"

struct dp_lora {
    dp_client *client;
    pthread_mutex_t mu;
    vllm_lora_info *items;
    size_t n, cap;
    int32_t next_id;
};

vllm_status dp_lora_create(dp_client *c, dp_lora **out) {
    *out = NULL;
    dp_lora *l = calloc(1, sizeof *l);
    if (!l) return vllm_error(VLLM_ERR_NOMEM, "dp: LoRA list");
    l->client = c;
    l->next_id = 1;
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return VLLM_OK;
}

void dp_lora_free(dp_lora *l) {
    if (!l) return;
    pthread_mutex_destroy(&l->mu);
    free(l->items);
    free(l);
}

static int64_t find_locked(const dp_lora *l, const char *name) {
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].name, name)) return (int64_t)i;
    return -1;
}

vllm_status dp_lora_add(dp_lora *l, const char *name, const char *path) {
    if (strlen(name) >= sizeof l->items->name || strlen(path) >= sizeof l->items->path)
        return vllm_error(VLLM_ERR_INVALID, "LoRA adapter name or path too long: %s", name);
    pthread_mutex_lock(&l->mu);
    vllm_status rc = VLLM_OK;
    if (find_locked(l, name) >= 0)
        rc = vllm_error(VLLM_ERR_INVALID, "The lora adapter '%s' has already been loaded.", name);
    else if ((rc = buf_grow((void **)&l->items, &l->cap, l->n + 1, sizeof *l->items)) == VLLM_OK) {
        vllm_lora_info *it = &l->items[l->n++];
        memset(it, 0, sizeof *it);
        snprintf(it->name, sizeof it->name, "%s", name);
        snprintf(it->path, sizeof it->path, "%s", path);
        it->id = l->next_id++;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static bool op_has(void *ud, const char *name) {
    dp_lora *l = ud;
    if (!name) return false;
    pthread_mutex_lock(&l->mu);
    bool have = find_locked(l, name) >= 0;
    pthread_mutex_unlock(&l->mu);
    return have;
}

static int32_t op_list(void *ud, vllm_lora_info *out, int32_t cap) {
    dp_lora *l = ud;
    pthread_mutex_lock(&l->mu);
    int32_t n = (int32_t)l->n;
    for (int32_t i = 0; i < n && i < cap; i++) out[i] = l->items[i];
    pthread_mutex_unlock(&l->mu);
    return n;
}

static vllm_status op_load(void *ud, const char *name, const char *path) {
    dp_lora *l = ud;
    if (op_has(l, name)) return vllm_error(VLLM_ERR_INVALID, "The lora adapter '%s' has already been loaded.", name);
    vllm_status rc = dp_client_lora(l->client, true, name, path);
    return rc == VLLM_OK ? dp_lora_add(l, name, path) : rc;
}

static vllm_status op_unload(void *ud, const char *name) {
    dp_lora *l = ud;
    if (!op_has(l, name)) return vllm_error(VLLM_ERR_NOT_FOUND, "The lora adapter '%s' cannot be found.", name);
    vllm_status rc = dp_client_lora(l->client, false, name, NULL);
    if (rc != VLLM_OK) return rc;
    pthread_mutex_lock(&l->mu);
    int64_t i = find_locked(l, name);
    if (i >= 0) memmove(&l->items[i], &l->items[i + 1], (l->n - (size_t)i - 1) * sizeof *l->items), l->n--;
    pthread_mutex_unlock(&l->mu);
    return VLLM_OK;
}

const serving_lora_ops *dp_lora_ops(void) {
    static const serving_lora_ops ops = {op_has, op_list, op_load, op_unload};
    return &ops;
}
