// libcurl.so.4, opened on the first call of any function declared in shim.h.
#include "shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    const char *(*easy_strerror)(CURLcode);
    void (*free)(void *);
    time_t (*getdate)(const char *, const time_t *);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    CURLU *(*url)(void);
    void (*url_cleanup)(CURLU *);
    CURLUcode (*url_get)(const CURLU *, CURLUPart, char **, unsigned int);
    CURLUcode (*url_set)(CURLU *, CURLUPart, const char *, unsigned int);
    curl_version_info_data *(*version_info)(CURLversion);
} api;

static int loaded;
static pthread_once_t loading = PTHREAD_ONCE_INIT;
// Why loading failed (dlerror's text, or the missing function), for the user.
static char failure[512];

// Every entry or none: `loaded` is set only when all of them resolved.
static void load(void) {
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(failure, sizeof failure, "%s", reason != NULL ? reason : "libcurl.so.4: not found");
        return;
    }
#define RESOLVE(field, name)                                                        \
    if ((*(void **)&api.field = dlsym(library, name)) == NULL) {                    \
        snprintf(failure, sizeof failure, "libcurl.so.4 has no function %s", name); \
        return;                                                                     \
    }
    RESOLVE(global_init, "curl_global_init")
    RESOLVE(easy_init, "curl_easy_init")
    RESOLVE(easy_cleanup, "curl_easy_cleanup")
    RESOLVE(easy_perform, "curl_easy_perform")
    RESOLVE(easy_setopt, "curl_easy_setopt")
    RESOLVE(easy_getinfo, "curl_easy_getinfo")
    RESOLVE(easy_strerror, "curl_easy_strerror")
    RESOLVE(free, "curl_free")
    RESOLVE(getdate, "curl_getdate")
    RESOLVE(slist_append, "curl_slist_append")
    RESOLVE(slist_free_all, "curl_slist_free_all")
    RESOLVE(url, "curl_url")
    RESOLVE(url_cleanup, "curl_url_cleanup")
    RESOLVE(url_get, "curl_url_get")
    RESOLVE(url_set, "curl_url_set")
    RESOLVE(version_info, "curl_version_info")
#undef RESOLVE
    loaded = 1;
}

static int ready(void) {
    pthread_once(&loading, load);
    return loaded;
}

const char *sluice_curl_unavailable(void) { return ready() ? NULL : failure; }

CURLcode curl_global_init(long flags) { return ready() ? api.global_init(flags) : CURLE_FAILED_INIT; }
CURL *curl_easy_init(void) { return ready() ? api.easy_init() : NULL; }
void curl_easy_cleanup(CURL *handle) {
    if (ready()) api.easy_cleanup(handle);
}
CURLcode curl_easy_perform(CURL *handle) { return ready() ? api.easy_perform(handle) : CURLE_FAILED_INIT; }
const char *curl_easy_strerror(CURLcode code) {
    return ready() ? api.easy_strerror(code) : "libcurl (libcurl.so.4) could not be loaded";
}
void curl_free(void *p) {
    if (ready()) api.free(p);
}
time_t curl_getdate(const char *p, const time_t *unused) { return ready() ? api.getdate(p, unused) : -1; }
struct curl_slist *curl_slist_append(struct curl_slist *list, const char *data) {
    return ready() ? api.slist_append(list, data) : NULL;
}
void curl_slist_free_all(struct curl_slist *list) {
    if (ready()) api.slist_free_all(list);
}
CURLU *curl_url(void) { return ready() ? api.url() : NULL; }
void curl_url_cleanup(CURLU *handle) {
    if (ready()) api.url_cleanup(handle);
}
CURLUcode curl_url_get(const CURLU *handle, CURLUPart what, char **part, unsigned int flags) {
    return ready() ? api.url_get(handle, what, part, flags) : CURLUE_OUT_OF_MEMORY;
}
CURLUcode curl_url_set(CURLU *handle, CURLUPart what, const char *part, unsigned int flags) {
    return ready() ? api.url_set(handle, what, part, flags) : CURLUE_OUT_OF_MEMORY;
}
curl_version_info_data *curl_version_info(CURLversion age) { return ready() ? api.version_info(age) : NULL; }

// The variadic pair, one typed entry per argument kind (a handle exists only once loaded).
#define SETOPT(name, type)                                         \
    CURLcode name(CURL *h, CURLoption o, type v) {                 \
        return ready() ? api.easy_setopt(h, o, v) : CURLE_FAILED_INIT; \
    }
SETOPT(sluice_setopt_long, long)
SETOPT(sluice_setopt_offt, curl_off_t)
SETOPT(sluice_setopt_string, const char *)
SETOPT(sluice_setopt_pointer, void *)
SETOPT(sluice_setopt_slist, struct curl_slist *)
SETOPT(sluice_setopt_data_callback, sluice_data_callback)
#undef SETOPT
CURLcode sluice_setopt_xferinfo(CURL *h, sluice_xferinfo_callback v) {
    return ready() ? api.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, v) : CURLE_FAILED_INIT;
}

#define GETINFO(name, type)                                         \
    CURLcode name(CURL *h, CURLINFO i, type *v) {                   \
        return ready() ? api.easy_getinfo(h, i, v) : CURLE_FAILED_INIT; \
    }
GETINFO(sluice_getinfo_long, long)
GETINFO(sluice_getinfo_offt, curl_off_t)
GETINFO(sluice_getinfo_string, char *)
#undef GETINFO
