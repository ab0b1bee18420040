import LarderCore
import Testing

@Suite("HTML/CSS references")
struct ReferencesTests {
    @Test func htmlAttributes() {
        let html = """
            <!doctype html><html><head>
            <link rel="stylesheet" href="css/app.css"><script src='js/app.js' defer></script>
            <!-- <img src="commented.png"> -->
            <script>var s = '<img src="in-script.png">';</script>
            <style>body { background: url(img/bg.png) }</style>
            </head><body><img SRC=img/logo.png alt="x"><a href="#top">top</a>
            <div style="background-image: url('img/inline.png')"></div></body></html>
            """
        let refs = References.inHTML(html)
        #expect(refs.contains("css/app.css"))
        #expect(refs.contains("js/app.js"))
        #expect(refs.contains("img/logo.png"))
        #expect(refs.contains("img/bg.png"))
        #expect(refs.contains("img/inline.png"))
        #expect(refs.contains("#top"))
        #expect(!refs.contains("commented.png"))
        #expect(!refs.contains("in-script.png"))
    }

    @Test func cssURLs() {
        let css = """
            @import "base.css";
            /* url(commented.png) */
            @font-face { src: url("../fonts/a.woff2") format("woff2"), url( ../fonts/a.woff ); }
            .x { background: url(data:image/png;base64,AAAA) }
            """
        #expect(
            References.inCSS(css) == ["base.css", "../fonts/a.woff2", "../fonts/a.woff", "data:image/png;base64,AAAA"])
    }

    @Test func resolution() throws {
        let from = try #require(RelativePath("css/app.css"))
        #expect(References.resolve("../fonts/a.woff2", from: from) == .local("fonts/a.woff2"))
        #expect(References.resolve("b.css?v=3#x", from: from) == .local("css/b.css"))
        #expect(References.resolve("/img/x.png", from: from) == .local("img/x.png"))
        #expect(References.resolve("../../x", from: from) == .escapes)
        #expect(References.resolve("https://cdn.example/x.js", from: from) == .external)
        #expect(References.resolve("data:text/plain,hi", from: from) == .external)
        #expect(References.resolve("larder://other/x.js", from: from) == .external)
        #expect(References.resolve("//cdn.example/x.js", from: from) == .external)
        #expect(References.resolve("#frag", from: from) == .external)
        #expect(References.resolve("%E9t%C3%A9.png", from: from) == .malformed)
        #expect(References.resolve("%C3%A9t%C3%A9.png", from: from) == .local("css/été.png"))
        #expect(References.resolve("../pages/about/", from: from) == .local("pages/about/"))
        #expect(References.resolve("{{ asset }}", from: from) == .external)
    }
}
