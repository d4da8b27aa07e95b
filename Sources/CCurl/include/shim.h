// libcurl, loaded when a stage first needs it (loader.c) rather than linked: libcurl and
// what it pulls in (GnuTLS, Kerberos, LDAP, SSH, p11-kit, …) were loaded and initialized in
// every run, about 5.5 MiB of resident memory for pipelines that fetch nothing.
//
// The libcurl functions Sluice calls keep their names for Swift, but each is declared under
// an assembler name of its own (`sluice_` + the name), which loader.c defines: it resolves
// the real function from libcurl.so.4 on first use. curl.h's own declarations of those
// names are moved aside with #define while it is read. Calling any other libcurl function
// fails to link, which is the point.
#ifndef SLUICE_CCURL_SHIM_H
#define SLUICE_CCURL_SHIM_H

#define CURL_DISABLE_TYPECHECK 1
#define curl_global_init sluice_unused_curl_global_init
#define curl_easy_init sluice_unused_curl_easy_init
#define curl_easy_cleanup sluice_unused_curl_easy_cleanup
#define curl_easy_perform sluice_unused_curl_easy_perform
#define curl_easy_strerror sluice_unused_curl_easy_strerror
#define curl_free sluice_unused_curl_free
#define curl_getdate sluice_unused_curl_getdate
#define curl_slist_append sluice_unused_curl_slist_append
#define curl_slist_free_all sluice_unused_curl_slist_free_all
#define curl_url sluice_unused_curl_url
#define curl_url_cleanup sluice_unused_curl_url_cleanup
#define curl_url_get sluice_unused_curl_url_get
#define curl_url_set sluice_unused_curl_url_set
#define curl_version_info sluice_unused_curl_version_info
#include <curl/curl.h>
#undef curl_global_init
#undef curl_easy_init
#undef curl_easy_cleanup
#undef curl_easy_perform
#undef curl_easy_strerror
#undef curl_free
#undef curl_getdate
#undef curl_slist_append
#undef curl_slist_free_all
#undef curl_url
#undef curl_url_cleanup
#undef curl_url_get
#undef curl_url_set
#undef curl_version_info

// When libcurl cannot be loaded: init and perform fail (CURLE_FAILED_INIT), constructors
// return NULL, curl_getdate -1, the rest do nothing.
CURLcode curl_global_init(long flags) __asm__("sluice_curl_global_init");
CURL *curl_easy_init(void) __asm__("sluice_curl_easy_init");
void curl_easy_cleanup(CURL *handle) __asm__("sluice_curl_easy_cleanup");
CURLcode curl_easy_perform(CURL *handle) __asm__("sluice_curl_easy_perform");
const char *curl_easy_strerror(CURLcode code) __asm__("sluice_curl_easy_strerror");
void curl_free(void *p) __asm__("sluice_curl_free");
time_t curl_getdate(const char *p, const time_t *unused) __asm__("sluice_curl_getdate");
struct curl_slist *curl_slist_append(struct curl_slist *list, const char *data) __asm__("sluice_curl_slist_append");
void curl_slist_free_all(struct curl_slist *list) __asm__("sluice_curl_slist_free_all");
CURLU *curl_url(void) __asm__("sluice_curl_url");
void curl_url_cleanup(CURLU *handle) __asm__("sluice_curl_url_cleanup");
CURLUcode curl_url_get(const CURLU *handle, CURLUPart what, char **part, unsigned int flags) __asm__("sluice_curl_url_get");
CURLUcode curl_url_set(CURLU *handle, CURLUPart what, const char *part, unsigned int flags) __asm__("sluice_curl_url_set");
curl_version_info_data *curl_version_info(CURLversion age) __asm__("sluice_curl_version_info");

// NULL once libcurl.so.4 is loaded with every function above; else why it could not be
// (loading it first if no call did yet), for a message that names libcurl, not the URL.
const char *sluice_curl_unavailable(void);

// curl_easy_setopt and curl_easy_getinfo are variadic; Swift needs one typed entry per argument kind.
CURLcode sluice_setopt_long(CURL *h, CURLoption o, long v);
CURLcode sluice_setopt_offt(CURL *h, CURLoption o, curl_off_t v);
CURLcode sluice_setopt_string(CURL *h, CURLoption o, const char *v);
CURLcode sluice_setopt_pointer(CURL *h, CURLoption o, void *v);
CURLcode sluice_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v);

typedef size_t (*sluice_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
typedef int (*sluice_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
CURLcode sluice_setopt_data_callback(CURL *h, CURLoption o, sluice_data_callback v);
CURLcode sluice_setopt_xferinfo(CURL *h, sluice_xferinfo_callback v);

CURLcode sluice_getinfo_long(CURL *h, CURLINFO i, long *v);
CURLcode sluice_getinfo_offt(CURL *h, CURLINFO i, curl_off_t *v);
CURLcode sluice_getinfo_string(CURL *h, CURLINFO i, char **v);

#endif
