# A Varnish edge in front of a Larder repository (Varnish 7, VCL 4.1). The origin sets the TTLs
# (Examples/cdn/nginx-repository.conf): Varnish honours Cache-Control max-age as it is.
#
# Replace the backend with your origin. scripts/integration/edge.py uses this file, changing only
# the backend's port.
vcl 4.1;

backend origin {
    .host = "127.0.0.1";
    .port = "8080";
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # A repository is public and static: no cookie or credential varies its content.
    unset req.http.Cookie;
    unset req.http.Authorization;
}

sub vcl_backend_response {
    if (bereq.url ~ "/index\.json(\.sig)?(\?.*)?$") {
        # No stale index or signature once its TTL is over: a new release is seen within
        # max-age. (Devices survive a signature and an index from two publications; grace
        # would only lengthen the window.)
        set beresp.grace = 0s;
    }
}

sub vcl_deliver {
    # Say whether the edge answered from its cache (for the tests' hit ratio; harmless).
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
