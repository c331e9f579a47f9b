"""How large an image the loaders decode unless told otherwise, apart from them: the command line's parsers name
it without importing numpy and Pillow."""

DEFAULT_MAX_PIXELS = 500_000_000
"""The largest image (width × height) the loaders decode unless told otherwise: 500 MP. ``vitroll overlay`` of one
image at full resolution peaks near 0.8 GiB + 20 bytes a pixel (measured, peak RSS: 1.7 GiB at 50 MP, 2.6 GiB at
100 MP, 5.4 GiB at 250 MP), so 500 MP takes about 10 GiB and leaves room in 24 GiB for a second large image in the
batch or a 16-bit image's float conversion; 1000 MP would take 19.5 GiB for the overlay alone. Pillow's own limit
(89 MP, an error past 179 MP) refused a 108 MP phone photo or a 150 MP medium-format one."""
