package sqlengine

// QuoteLiteral exposes quoteLiteral to the fuzz targets that run it on the
// real servers.
var QuoteLiteral = quoteLiteral
