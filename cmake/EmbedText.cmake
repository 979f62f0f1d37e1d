# cmake -DIN=file -DOUT=file.inc -P EmbedText.cmake: IN as a C++ raw string literal.
file(READ ${IN} _text)
file(WRITE ${OUT} "R\"profinfer_embed(${_text})profinfer_embed\"")
