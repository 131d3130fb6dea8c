#ifndef SIWA_CCURL_SHIM_H
#define SIWA_CCURL_SHIM_H

#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic, so Swift cannot call them.
// Each helper below fixes the argument type, so an option is always handed the
// type libcurl reads for it.

/// curl_global_init with the default flags (a macro Swift does not import).
static inline CURLcode siwa_curl_global_init(void) {
    return curl_global_init(CURL_GLOBAL_DEFAULT);
}

/// An option that takes a `long` (flags, timeouts, verification switches).
static inline CURLcode siwa_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

/// An option that takes a `curl_off_t` (CURLOPT_MAXFILESIZE_LARGE).
static inline CURLcode siwa_curl_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

/// An option that takes a C string; libcurl copies it (since 7.17.0).
static inline CURLcode siwa_curl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

/// An option that takes an opaque pointer (CURLOPT_WRITEDATA).
static inline CURLcode siwa_curl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

/// CURLOPT_CURLU: the already parsed URL handle to fetch.
static inline CURLcode siwa_curl_setopt_curlu(CURL *handle, CURLU *url) {
    return curl_easy_setopt(handle, CURLOPT_CURLU, url);
}

/// CURLOPT_WRITEFUNCTION: the body sink.
static inline CURLcode siwa_curl_setopt_write_function(CURL *handle, curl_write_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, callback);
}

/// CURLAUTH_BEARER (a cast macro Swift does not import), for CURLOPT_HTTPAUTH.
static const unsigned long siwa_curl_auth_bearer = CURLAUTH_BEARER;

/// CURLINFO_RESPONSE_CODE: the HTTP status of the last response (0 when none).
static inline long siwa_curl_response_code(CURL *handle) {
    long status = 0;
    if (curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK) {
        return 0;
    }
    return status;
}

/// CURLOPT_OPENSOCKETFUNCTION: the callback that opens each socket, given the address
/// libcurl is about to connect to (so an address can be refused before any packet).
static inline CURLcode siwa_curl_setopt_opensocket_function(CURL *handle, curl_opensocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

/// The value of the response header `name` of the last response, or NULL when it has none.
static inline const char *siwa_curl_response_header(CURL *handle, const char *name) {
    struct curl_header *header = NULL;
    if (curl_easy_header(handle, name, 0, CURLH_HEADER, -1, &header) != CURLHE_OK || header == NULL) {
        return NULL;
    }
    return header->value;
}

/// CURLINFO_ACTIVESOCKET: the socket of the connection the handle's last transfer left open
/// for the next one, or CURL_SOCKET_BAD when it kept none.
static inline curl_socket_t siwa_curl_active_socket(CURL *handle) {
    curl_socket_t socket = CURL_SOCKET_BAD;
    if (curl_easy_getinfo(handle, CURLINFO_ACTIVESOCKET, &socket) != CURLE_OK) {
        return CURL_SOCKET_BAD;
    }
    return socket;
}

/// Whether the handle's last response came over HTTP/1.0 or HTTP/1.1 (CURLINFO_HTTP_VERSION).
static inline int siwa_curl_last_response_http1(CURL *handle) {
    long version = 0;
    if (curl_easy_getinfo(handle, CURLINFO_HTTP_VERSION, &version) != CURLE_OK) {
        return 0;
    }
    return version == CURL_HTTP_VERSION_1_0 || version == CURL_HTTP_VERSION_1_1;
}

#endif
