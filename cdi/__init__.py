"""CDI specs for prepared claims: naming, building, validation and the atomic writer.

Pure modules (`naming`, `spec`, `validate`) decide what a claim's spec says;
`writer` is the only one that touches the CDI directory.
"""
