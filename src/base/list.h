/*
 * list.h - intrusive circular doubly linked lists (the scheduler's queues,
 * the engine's finished requests).
 *
 * A list is a sentinel node whose next/prev are the head and tail; an element
 * embeds a list_node and is recovered with list_entry(). Nothing allocates:
 * moving a request between the waiting and running queues is four stores.
 *
 *     list_node waiting; list_init(&waiting);
 *     list_push_back(&waiting, &seq->node);
 *     for (list_node *n = waiting.next; n != &waiting; n = n->next) {
 *         seq *s = list_entry(n, seq, node); ...
 *     }
 */
#ifndef VLLM_BASE_LIST_H
#define VLLM_BASE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct list_node {
    struct list_node *prev, *next;
} list_node;

#define list_entry(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void list_init(list_node *head) { head->prev = head->next = head; }
static inline bool list_empty(const list_node *head) { return head->next == head; }

/* Links node in just before pos (pos may be the sentinel: that appends). */
static inline void list_insert_before(list_node *pos, list_node *node) {
    node->prev = pos->prev;
    node->next = pos;
    pos->prev->next = node;
    pos->prev = node;
}

static inline void list_push_back(list_node *head, list_node *node) { list_insert_before(head, node); }
static inline void list_push_front(list_node *head, list_node *node) {
    list_insert_before(head->next, node);
}

/* Unlinks node; it points to itself afterwards so a second remove is harmless. */
static inline void list_remove(list_node *node) {
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = node->next = node;
}

#endif
