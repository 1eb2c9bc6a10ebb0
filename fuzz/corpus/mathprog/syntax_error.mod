var x >= 0;
minimize z: x
s.t. c: x >= 1;
end;
